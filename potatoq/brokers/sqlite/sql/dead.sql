-- Dead letters: payload kept unchanged, capped by dead_letter_max and dead_letter_ttl.

-- name: dead_insert
INSERT INTO potatoq_dead (id, queue, task, priority, reason, payload, deliveries, died_at)
VALUES (:id, :queue, :task, :priority, :reason, :payload, :deliveries, :now);

-- name: dead_trim_age
DELETE FROM potatoq_dead WHERE died_at < :cutoff;

-- name: dead_trim_count
-- Keep the newest :keep rows.
DELETE FROM potatoq_dead
WHERE seq <= (SELECT seq FROM potatoq_dead ORDER BY seq DESC LIMIT 1 OFFSET :keep);

-- name: dead_list
-- Letters past dead_letter_ttl are never shown, even before housekeeping removes them.
SELECT id, queue, task, reason, payload, died_at, deliveries FROM potatoq_dead
WHERE died_at >= :cutoff
ORDER BY seq DESC LIMIT :limit OFFSET :offset;

-- name: dead_newest
-- The latest death of each id (all ids when :ids is NULL), oldest first.
SELECT seq, id, queue, task, priority, payload FROM potatoq_dead
WHERE died_at >= :cutoff AND seq IN (
    SELECT max(seq) FROM potatoq_dead
    WHERE :ids IS NULL OR id IN (SELECT value FROM json_each(:ids))
    GROUP BY id
)
ORDER BY seq;

-- name: dead_delete
DELETE FROM potatoq_dead WHERE seq = :seq;

-- name: dead_purge
DELETE FROM potatoq_dead;

-- name: dead_restore
-- Back to ready with the payload unchanged; an id already waiting or running is left alone,
-- and so is a unique task whose key another task holds (both stay dead letters).
INSERT INTO potatoq_jobs (id, queue, task, priority, state, run_at, payload, limit_key, limit_max,
                          unique_key, unique_until, unique_running, rate_key, rate_interval, rate_burst)
VALUES (:id, :queue, :task, :priority, 1, :now, :payload, :limit_key, :limit_max,
        :unique_key, :unique_until, :unique_running, :rate_key, :rate_interval, :rate_burst)
ON CONFLICT DO NOTHING;
