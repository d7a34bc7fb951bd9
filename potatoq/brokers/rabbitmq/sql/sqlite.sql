-- The RabbitMQ limit store on a SQLite result backend (potatoq/brokers/rabbitmq/
-- store_sql.py runs them; the tables are the backend's migration 0007). Every transition
-- runs in one BEGIN IMMEDIATE transaction, so it is atomic across the processes sharing
-- the file. A block may hold several statements, run in order with the same parameters;
-- the last one's rows are the reply. Times: epoch milliseconds of the host's clock (:now).

-- name: slot_lock
-- The limit in force (and the time, as the PostgreSQL statement returns it).
INSERT INTO potatoq_rmq_limits (key, carried) VALUES (:key, :carried)
ON CONFLICT (key) DO UPDATE SET carried = excluded.carried;
SELECT coalesce(override, carried), :now FROM potatoq_rmq_limits WHERE key = :key;

-- name: slot_claim
-- A slot for the holder if it holds one already or fewer than the limit are live; else its
-- task is listed as waiting. Returns 1 for a slot. The key's expired slots and waits go.
DELETE FROM potatoq_rmq_slots WHERE key = :key AND expires_at <= :now;
DELETE FROM potatoq_rmq_waits WHERE kind = 'c' AND key = :key AND until <= :now;
INSERT INTO potatoq_rmq_slots (key, holder, expires_at)
SELECT :key, :holder, :until
WHERE EXISTS (SELECT 1 FROM potatoq_rmq_slots WHERE key = :key AND holder = :holder)
   OR (SELECT count(*) FROM potatoq_rmq_slots WHERE key = :key) < :limit
ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at;
DELETE FROM potatoq_rmq_waits
WHERE kind = 'c' AND key = :key AND task = :task
  AND EXISTS (SELECT 1 FROM potatoq_rmq_slots WHERE key = :key AND holder = :holder);
INSERT INTO potatoq_rmq_waits (kind, key, task, until)
SELECT 'c', :key, :task, :listed
WHERE NOT EXISTS (SELECT 1 FROM potatoq_rmq_slots WHERE key = :key AND holder = :holder)
ON CONFLICT (kind, key, task) DO UPDATE SET until = excluded.until;
SELECT count(*) FROM potatoq_rmq_slots WHERE key = :key AND holder = :holder;

-- name: slot_renew
-- The leases of slots still held by this process (:keys and :holders, JSON arrays of the
-- same length), extended. An expired slot is not brought back.
UPDATE potatoq_rmq_slots SET expires_at = :now + :lease
WHERE expires_at > :now AND (key, holder) IN (
    SELECT k.value, h.value FROM json_each(:keys) AS k JOIN json_each(:holders) AS h ON h.key = k.key);

-- name: slot_release
DELETE FROM potatoq_rmq_slots WHERE key = :key AND holder = :holder;

-- name: limit_set
-- A run-time override (NULL: the max the tasks carry applies again).
INSERT INTO potatoq_rmq_limits (key, override) VALUES (:key, :override)
ON CONFLICT (key) DO UPDATE SET override = excluded.override;

-- name: limit_lock
-- Usage: the time (the PostgreSQL statement also locks every key's row here).
SELECT '', :now;

-- name: limit_usage
-- (key, limit, running, waiting, overridden) of each key in use, waited on or overridden;
-- the others are forgotten, and expired slots and waits go.
DELETE FROM potatoq_rmq_slots WHERE expires_at <= :now;
DELETE FROM potatoq_rmq_waits WHERE kind = 'c' AND until <= :now;
DELETE FROM potatoq_rmq_limits
WHERE override IS NULL
  AND NOT EXISTS (SELECT 1 FROM potatoq_rmq_slots AS s WHERE s.key = potatoq_rmq_limits.key)
  AND NOT EXISTS (SELECT 1 FROM potatoq_rmq_waits AS w
                  WHERE w.kind = 'c' AND w.key = potatoq_rmq_limits.key);
SELECT l.key, coalesce(CAST(coalesce(l.override, l.carried) AS TEXT), ''),
       (SELECT count(*) FROM potatoq_rmq_slots AS s WHERE s.key = l.key),
       (SELECT count(*) FROM potatoq_rmq_waits AS w WHERE w.kind = 'c' AND w.key = l.key),
       l.override IS NOT NULL
FROM potatoq_rmq_limits AS l ORDER BY l.key;

-- name: rate_set
-- A run-time rate (NULL step: the tasks' own again): the key starts again with a full
-- burst, in a new generation.
INSERT INTO potatoq_rmq_rates (key, gen, set_step, set_burst) VALUES (:key, 1, :step, :burst)
ON CONFLICT (key) DO UPDATE
SET tat = 0, gen = gen + 1, set_step = excluded.set_step, set_burst = excluded.set_burst;

-- name: rate_lock
-- (generation, override step and burst, tat, now) of the key.
INSERT INTO potatoq_rmq_rates (key, seen_step, seen_burst) VALUES (:key, :step, :burst)
ON CONFLICT (key) DO UPDATE SET seen_step = excluded.seen_step, seen_burst = excluded.seen_burst;
SELECT gen, set_step, set_burst, tat, :now FROM potatoq_rmq_rates WHERE key = :key;

-- name: rate_answer
-- The key's new tat (NULL: unchanged) and the task's place: listed as waiting until
-- :listed, or (NULL) no longer. The key's expired waits go.
UPDATE potatoq_rmq_rates SET tat = :tat WHERE key = :key AND :tat IS NOT NULL;
DELETE FROM potatoq_rmq_waits WHERE kind = 'r' AND key = :key AND until <= :now;
DELETE FROM potatoq_rmq_waits WHERE kind = 'r' AND key = :key AND task = :task AND :listed IS NULL;
INSERT INTO potatoq_rmq_waits (kind, key, task, until)
SELECT 'r', :key, :task, :listed WHERE :listed IS NOT NULL
ON CONFLICT (kind, key, task) DO UPDATE SET until = excluded.until;
SELECT 1;

-- name: rate_line
-- The key's line of waiters, for a task that reserves no token (see lua/rate_take.lua):
-- (the task's own listing or NULL, the last listing or NULL, how many are listed).
SELECT (SELECT until FROM potatoq_rmq_waits WHERE kind = 'r' AND key = :key AND task = :task AND until > :now),
       (SELECT max(until) FROM potatoq_rmq_waits WHERE kind = 'r' AND key = :key AND until > :now),
       (SELECT count(*) FROM potatoq_rmq_waits WHERE kind = 'r' AND key = :key AND until > :now);

-- name: rate_usage
-- (key, ms per token, burst, tat, waiting, overridden, now) of each key with waiting tasks,
-- tokens in use or an override. Idle keys of generation 0 are forgotten (a key that had a
-- rate set keeps its generation, so tokens reserved before it stay outdated).
DELETE FROM potatoq_rmq_waits WHERE kind = 'r' AND until <= :now;
DELETE FROM potatoq_rmq_rates
WHERE gen = 0 AND set_step IS NULL AND tat <= :now
  AND NOT EXISTS (SELECT 1 FROM potatoq_rmq_waits AS w
                  WHERE w.kind = 'r' AND w.key = potatoq_rmq_rates.key);
SELECT key, coalesce(CAST(coalesce(set_step, seen_step) AS TEXT), ''),
       coalesce(CAST(CASE WHEN set_step IS NOT NULL THEN set_burst ELSE seen_burst END AS TEXT), ''),
       CAST(CASE WHEN tat > 0 THEN tat ELSE :now END AS TEXT), waiting, set_step IS NOT NULL, :now
FROM (SELECT r.*, (SELECT count(*) FROM potatoq_rmq_waits AS w WHERE w.kind = 'r' AND w.key = r.key)
                  AS waiting
      FROM potatoq_rmq_rates AS r)
WHERE waiting > 0 OR set_step IS NOT NULL OR tat > :now
ORDER BY key;

-- name: unique_take
-- The key for the task, for :ttl ms, unless another live task holds it ("stale": a holder
-- the caller found finished, taken over). Returns the task when it holds the key now; no
-- row when another does.
INSERT INTO potatoq_rmq_unique AS u (key, task, expires_at) VALUES (:key, :task, :now + :ttl)
ON CONFLICT (key) DO UPDATE SET task = excluded.task, expires_at = excluded.expires_at
WHERE u.task = excluded.task OR u.task = :stale OR u.expires_at <= :now
RETURNING task;

-- name: unique_holder
SELECT task FROM potatoq_rmq_unique WHERE key = :key;

-- name: unique_release
-- The key a task holds, released (found by the task's id).
DELETE FROM potatoq_rmq_unique WHERE task = :task;

-- name: unique_sweep
-- A few keys past their TTL, deleted now and then.
DELETE FROM potatoq_rmq_unique
WHERE key IN (SELECT key FROM potatoq_rmq_unique WHERE expires_at <= :now ORDER BY expires_at LIMIT 500);
