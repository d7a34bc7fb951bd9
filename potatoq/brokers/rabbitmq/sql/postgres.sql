-- The RabbitMQ limit store on a PostgreSQL result backend (potatoq/brokers/rabbitmq/
-- store_sql.py runs them; the tables are the backend's migration 0009). Each transition is
-- one statement, or a short transaction whose first statement locks the key's row: a
-- statement after it reads the rows as committed once the lock was granted. Rows are
-- locked in one order everywhere (a limit's row before its slots, slots by key and holder)
-- so two transitions never wait on each other in a circle. Times: epoch milliseconds of
-- the server's clock, read by the first statement and passed on as %(now)s.
-- Slot and token steps commit without waiting for the WAL flush (synchronous_commit off
-- for their transaction): a server crash may forget the last few of them, which costs a
-- slot or a token once (leases and tats are rebuilt by the next takes), as on a Redis
-- backend between two fsyncs. Unique keys are flushed: a lost one would let a duplicate in.

-- name: slot_lock
-- The key's row, locked: the limit in force and the time.
INSERT INTO {schema}.potatoq_rmq_limits AS l (key, carried) VALUES (%(key)s, %(carried)s)
ON CONFLICT (key) DO UPDATE SET carried = excluded.carried
RETURNING coalesce(l.override, l.carried), (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
          set_config('synchronous_commit', 'off', true);

-- name: slot_claim
-- A slot for the holder if it holds one already or fewer than the limit are live; else its
-- task is listed as waiting. Returns 1 for a slot. The key's expired slots and waits go
-- (the holder's own is renewed instead: a statement can't both delete and update a row).
WITH expired AS (
    DELETE FROM {schema}.potatoq_rmq_slots
    WHERE (key, holder) IN (
        SELECT key, holder FROM {schema}.potatoq_rmq_slots
        WHERE key = %(key)s AND holder <> %(holder)s AND expires_at <= %(now)s
        ORDER BY holder FOR UPDATE)
), stale AS (
    DELETE FROM {schema}.potatoq_rmq_waits WHERE kind = 'c' AND key = %(key)s AND until <= %(now)s
), claimed AS (
    INSERT INTO {schema}.potatoq_rmq_slots AS s (key, holder, expires_at)
    SELECT %(key)s, %(holder)s, %(until)s
    WHERE EXISTS (SELECT FROM {schema}.potatoq_rmq_slots
                  WHERE key = %(key)s AND holder = %(holder)s AND expires_at > %(now)s)
       OR (SELECT count(*) FROM {schema}.potatoq_rmq_slots
           WHERE key = %(key)s AND expires_at > %(now)s) < %(limit)s
    ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING 1
), unlisted AS (
    DELETE FROM {schema}.potatoq_rmq_waits
    WHERE kind = 'c' AND key = %(key)s AND task = %(task)s AND EXISTS (SELECT FROM claimed)
), listed AS (
    INSERT INTO {schema}.potatoq_rmq_waits (kind, key, task, until)
    SELECT 'c', %(key)s, %(task)s, %(listed)s WHERE NOT EXISTS (SELECT FROM claimed)
    ON CONFLICT (kind, key, task) DO UPDATE SET until = excluded.until
)
SELECT count(*) FROM claimed;

-- name: slot_renew
-- The leases of slots still held by this process, extended. An expired slot is not
-- brought back: its key may have given it to another holder already.
UPDATE {schema}.potatoq_rmq_slots AS s
SET expires_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + %(lease)s
WHERE (s.key, s.holder) IN (
    SELECT c.key, c.holder FROM {schema}.potatoq_rmq_slots AS c
    JOIN unnest(%(keys)s::text[], %(holders)s::text[]) AS p (key, holder)
      ON c.key = p.key AND c.holder = p.holder
    WHERE c.expires_at > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
    ORDER BY c.key, c.holder FOR UPDATE)
  AND set_config('synchronous_commit', 'off', true) = 'off';

-- name: slot_release
DELETE FROM {schema}.potatoq_rmq_slots
WHERE key = %(key)s AND holder = %(holder)s AND set_config('synchronous_commit', 'off', true) = 'off';

-- name: limit_set
-- A run-time override (NULL: the max the tasks carry applies again).
INSERT INTO {schema}.potatoq_rmq_limits AS l (key, override) VALUES (%(key)s, %(override)s)
ON CONFLICT (key) DO UPDATE SET override = excluded.override;

-- name: limit_lock
-- Usage: every key's row, locked in key order (a slot take waits, briefly).
SELECT key, (extract(epoch FROM clock_timestamp()) * 1000)::bigint
FROM {schema}.potatoq_rmq_limits ORDER BY key FOR UPDATE;

-- name: limit_usage
-- (key, limit, running, waiting, overridden) of each key in use, waited on or overridden;
-- the others are forgotten, and expired slots and waits go.
WITH slots AS MATERIALIZED (
    SELECT key, count(*) FILTER (WHERE expires_at > %(now)s) AS live
    FROM {schema}.potatoq_rmq_slots GROUP BY key
), waits AS MATERIALIZED (
    SELECT key, count(*) FILTER (WHERE until > %(now)s) AS live
    FROM {schema}.potatoq_rmq_waits WHERE kind = 'c' GROUP BY key
), usage AS MATERIALIZED (
    SELECT l.key, coalesce(l.override, l.carried) AS lim, coalesce(s.live, 0) AS running,
           coalesce(w.live, 0) AS waiting, l.override IS NOT NULL AS overridden
    FROM {schema}.potatoq_rmq_limits AS l
    LEFT JOIN slots AS s ON s.key = l.key LEFT JOIN waits AS w ON w.key = l.key
), expired AS (
    DELETE FROM {schema}.potatoq_rmq_slots
    WHERE (key, holder) IN (
        SELECT key, holder FROM {schema}.potatoq_rmq_slots
        WHERE expires_at <= %(now)s ORDER BY key, holder FOR UPDATE)
), stale AS (
    DELETE FROM {schema}.potatoq_rmq_waits WHERE kind = 'c' AND until <= %(now)s
), forgotten AS (
    DELETE FROM {schema}.potatoq_rmq_limits
    WHERE key IN (SELECT key FROM usage WHERE running = 0 AND waiting = 0 AND NOT overridden)
)
SELECT key, coalesce(lim::text, ''), running, waiting, overridden::int
FROM usage WHERE running > 0 OR waiting > 0 OR overridden ORDER BY key;

-- name: rate_set
-- A run-time rate (NULL step: the tasks' own again): the key starts again with a full
-- burst, in a new generation.
INSERT INTO {schema}.potatoq_rmq_rates AS r (key, gen, set_step, set_burst)
VALUES (%(key)s, 1, %(step)s, %(burst)s)
ON CONFLICT (key) DO UPDATE
SET tat = 0, gen = r.gen + 1, set_step = excluded.set_step, set_burst = excluded.set_burst;

-- name: rate_lock
-- The key's row, locked: (generation, override step and burst, tat, now).
INSERT INTO {schema}.potatoq_rmq_rates AS r (key, seen_step, seen_burst)
VALUES (%(key)s, %(step)s, %(burst)s)
ON CONFLICT (key) DO UPDATE SET seen_step = excluded.seen_step, seen_burst = excluded.seen_burst
RETURNING r.gen, r.set_step, r.set_burst, r.tat,
          (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
          set_config('synchronous_commit', 'off', true);

-- name: rate_answer
-- The key's new tat (NULL: unchanged) and the task's place: listed as waiting until
-- %(listed)s, or (NULL) no longer. The key's expired waits go.
WITH moved AS (
    UPDATE {schema}.potatoq_rmq_rates SET tat = %(tat)s
    WHERE key = %(key)s AND %(tat)s::float8 IS NOT NULL
), stale AS (
    DELETE FROM {schema}.potatoq_rmq_waits WHERE kind = 'r' AND key = %(key)s AND until <= %(now)s
), unlisted AS (
    DELETE FROM {schema}.potatoq_rmq_waits
    WHERE kind = 'r' AND key = %(key)s AND task = %(task)s AND %(listed)s::bigint IS NULL
), listed AS (
    INSERT INTO {schema}.potatoq_rmq_waits (kind, key, task, until)
    SELECT 'r', %(key)s, %(task)s, %(listed)s WHERE %(listed)s::bigint IS NOT NULL
    ON CONFLICT (kind, key, task) DO UPDATE SET until = excluded.until
)
SELECT 1;

-- name: rate_line
-- The key's line of waiters, for a task that reserves no token (see lua/rate_take.lua):
-- (the task's own listing or NULL, the last listing or NULL, how many are listed).
SELECT (SELECT until FROM {schema}.potatoq_rmq_waits WHERE kind = 'r' AND key = %(key)s AND task = %(task)s AND until > %(now)s),
       (SELECT max(until) FROM {schema}.potatoq_rmq_waits WHERE kind = 'r' AND key = %(key)s AND until > %(now)s),
       (SELECT count(*) FROM {schema}.potatoq_rmq_waits WHERE kind = 'r' AND key = %(key)s AND until > %(now)s);

-- name: rate_usage
-- (key, ms per token, burst, tat, waiting, overridden, now) of each key with waiting tasks,
-- tokens in use or an override. Idle keys of generation 0 are forgotten (a key that had a
-- rate set keeps its generation, so tokens reserved before it stay outdated).
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), waits AS MATERIALIZED (
    SELECT w.key, count(*) FILTER (WHERE w.until > c.now) AS live
    FROM {schema}.potatoq_rmq_waits AS w, clock AS c WHERE w.kind = 'r' GROUP BY w.key
), usage AS MATERIALIZED (
    SELECT r.key, coalesce(r.set_step, r.seen_step) AS step,
           CASE WHEN r.set_step IS NOT NULL THEN r.set_burst ELSE r.seen_burst END AS burst,
           CASE WHEN r.tat > 0 THEN r.tat ELSE c.now END AS tat, coalesce(w.live, 0) AS waiting,
           r.set_step IS NOT NULL AS overridden, r.gen, r.tat > c.now AS busy, c.now
    FROM {schema}.potatoq_rmq_rates AS r CROSS JOIN clock AS c LEFT JOIN waits AS w ON w.key = r.key
), stale AS (
    DELETE FROM {schema}.potatoq_rmq_waits
    WHERE kind = 'r' AND until <= (SELECT now FROM clock)
), forgotten AS (
    -- the row's own columns again: a take that locked the row first is waited for and its
    -- new tat read here, while the subquery still sees the row as before
    DELETE FROM {schema}.potatoq_rmq_rates
    WHERE key IN (SELECT key FROM usage
                  WHERE waiting = 0 AND NOT overridden AND NOT busy AND gen = 0)
      AND gen = 0 AND set_step IS NULL AND tat <= (SELECT now FROM clock)
)
SELECT key, coalesce(step::text, ''), coalesce(burst::text, ''), tat::text, waiting,
       overridden::int, now
FROM usage WHERE waiting > 0 OR overridden OR busy ORDER BY key;

-- name: unique_take
-- The key for the task, for %(ttl)s ms, unless another live task holds it ("stale": a
-- holder the caller found finished, taken over). Returns the task when it holds the key
-- now; no row when another does (the upsert still locked that holder's row, so the
-- unique_holder after it reads it as committed).
INSERT INTO {schema}.potatoq_rmq_unique AS u (key, task, expires_at)
VALUES (%(key)s, %(task)s, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + %(ttl)s)
ON CONFLICT (key) DO UPDATE SET task = excluded.task, expires_at = excluded.expires_at
WHERE u.task = excluded.task OR u.task = %(stale)s
   OR u.expires_at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
RETURNING u.task;

-- name: unique_holder
SELECT task FROM {schema}.potatoq_rmq_unique WHERE key = %(key)s;

-- name: unique_release
-- The key a task holds, released (found by the task's id).
DELETE FROM {schema}.potatoq_rmq_unique WHERE task = %(task)s;

-- name: unique_sweep
-- A few keys past their TTL, deleted (now and then, in a statement of its own): only
-- those no transaction is locking, so it never waits.
DELETE FROM {schema}.potatoq_rmq_unique
WHERE key IN (
    SELECT key FROM {schema}.potatoq_rmq_unique
    WHERE expires_at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
    ORDER BY expires_at LIMIT 500 FOR UPDATE SKIP LOCKED);
