-- Wake-ups: LISTEN/NOTIFY channels named potatoq:<queue> (see wakeups.channel_name).

-- name: notify_channels
-- The trailing edge of a debounce window: one NOTIFY per channel whose enqueues were held.
-- payload '' says "work is ready"; 'due' says "a task falls due soon: learn when" (see
-- wakeups.DUE_PAYLOAD).
-- It carries no data, so its commit needn't wait for the WAL flush: asynchronous commit
-- delivers it sooner and holds NOTIFY's cluster-wide commit lock only briefly.
WITH no_flush AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, %(payload)s) FROM unnest(%(channels)s::text[]) AS channel
)
SELECT count(*) AS notified FROM notified, no_flush;

-- name: listen
-- {channel} is the quoted channel name.
LISTEN {channel};
