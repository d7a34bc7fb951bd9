-- Dead letters: listed newest first, retried with their payload unchanged.

-- name: dead_list
SELECT id, queue, task, reason, payload, extract(epoch FROM died_at)::float8 AS died_at, deliveries
FROM {schema}.potatoq_dead
ORDER BY died_at DESC, seq DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: dead_retry
-- Move dead letters (all when all) back to their queue as ready tasks with a fresh
-- delivery count, and NOTIFY each queue once. An id that is waiting again already (sent
-- anew meanwhile) is just removed from the dead letters.
WITH revived AS (
    DELETE FROM {schema}.potatoq_dead
    WHERE %(all)s OR id = ANY (%(ids)s::text[])
    RETURNING id, seq, queue, priority, payload
), inserted AS (
    INSERT INTO {schema}.potatoq_jobs (id, queue, priority, state, run_at, payload)
    SELECT id, queue, priority, 1, now(), payload FROM revived ORDER BY seq
    ON CONFLICT (id) DO NOTHING
    RETURNING queue
), queues AS MATERIALIZED (
    SELECT DISTINCT queue FROM inserted
), notified AS MATERIALIZED (
    SELECT pg_notify(CASE WHEN octet_length(%(channel_prefix)s || queue) <= 63
                          THEN %(channel_prefix)s || queue
                          ELSE 'potatoq:' || md5(%(channel_prefix)s || queue) END, '')
    FROM queues WHERE %(notify)s
)
SELECT (SELECT count(*) FROM revived) AS revived, (SELECT count(*) FROM notified) AS notified;

-- name: dead_purge
DELETE FROM {schema}.potatoq_dead;

-- name: dead_trim
-- Keep at most max dead letters, none older than ttl seconds.
DELETE FROM {schema}.potatoq_dead
WHERE died_at < now() - make_interval(secs => %(ttl)s::float8)
   OR id IN (SELECT id FROM {schema}.potatoq_dead ORDER BY died_at DESC, seq DESC OFFSET %(max)s);
