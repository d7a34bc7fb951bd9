-- Dead letters: listed newest first, retried with their payload unchanged.

-- name: dead_list
-- Letters past dead_letter_ttl are never shown, even before the sweep deletes them.
SELECT id, queue, task, reason, payload, extract(epoch FROM died_at)::float8 AS died_at, deliveries
FROM {schema}.potatoq_dead
WHERE died_at >= now() - make_interval(secs => %(ttl)s::float8)
ORDER BY died_at DESC, seq DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: dead_retry
-- Put dead letters (all when "all") back on their queue as ready tasks with a fresh
-- delivery count, and NOTIFY each queue once. An id that died more than once is retried
-- from its latest letter; the earlier ones stay. A letter is deleted only if its task was
-- inserted: one whose id is waiting or running again (ON CONFLICT) stays a dead letter,
-- so a retry never drops a payload, even against a concurrent enqueue of that id.
WITH candidates AS MATERIALIZED (
    SELECT DISTINCT ON (id) id, seq, queue, priority, payload FROM {schema}.potatoq_dead
    WHERE (%(all)s OR id = ANY (%(ids)s::text[]))
      AND died_at >= now() - make_interval(secs => %(ttl)s::float8)
    ORDER BY id, seq DESC
), inserted AS (
    INSERT INTO {schema}.potatoq_jobs (id, queue, priority, state, run_at, payload)
    SELECT id, queue, priority, 1, now(), payload FROM candidates ORDER BY seq
    ON CONFLICT DO NOTHING
    RETURNING id, queue
), removed AS (
    DELETE FROM {schema}.potatoq_dead
    WHERE seq IN (SELECT c.seq FROM candidates AS c JOIN inserted AS i ON i.id = c.id)
), queues AS MATERIALIZED (
    SELECT DISTINCT queue FROM inserted
), notified AS MATERIALIZED (
    SELECT pg_notify(CASE WHEN octet_length(%(channel_prefix)s || queue) <= 63
                          THEN %(channel_prefix)s || queue
                          ELSE 'potatoq:' || md5(%(channel_prefix)s || queue) END, '')
    FROM queues WHERE %(notify)s
)
SELECT (SELECT count(*) FROM inserted) AS revived, (SELECT count(*) FROM notified) AS notified;

-- name: dead_purge
DELETE FROM {schema}.potatoq_dead;

-- name: dead_trim
-- Keep at most max dead letters (at least 1, as job_finish does), none older than ttl seconds.
DELETE FROM {schema}.potatoq_dead
WHERE died_at < now() - make_interval(secs => %(ttl)s::float8)
   OR seq IN (SELECT seq FROM {schema}.potatoq_dead ORDER BY died_at DESC, seq DESC
              OFFSET greatest(%(max)s::integer, 1));
