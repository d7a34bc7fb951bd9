-- Wake-ups: LISTEN/NOTIFY channels named potatoq:<queue> (see pgwake.channel_name).

-- name: notify_channels
-- The trailing edge of a debounce window: one NOTIFY per channel whose enqueues were held.
WITH notified AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(channels)s::text[]) AS channel
)
SELECT count(*) AS notified FROM notified;

-- name: listen
-- {channel} is the quoted channel name.
LISTEN {channel};
