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
SELECT id, queue, task, reason, payload, died_at, deliveries FROM potatoq_dead
ORDER BY seq DESC LIMIT :limit OFFSET :offset;

-- name: dead_take_all
DELETE FROM potatoq_dead RETURNING id, queue, task, priority, payload;

-- name: dead_take_ids
DELETE FROM potatoq_dead WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, queue, task, priority, payload;

-- name: dead_purge
DELETE FROM potatoq_dead;

-- name: dead_restore
-- Back to ready with the payload unchanged; an id already waiting or running is left alone.
INSERT INTO potatoq_jobs (id, queue, task, priority, state, run_at, payload)
VALUES (:id, :queue, :task, :priority, 1, :now, :payload)
ON CONFLICT (id) DO NOTHING;
