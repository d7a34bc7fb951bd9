-- Concurrency limits (potatoq/brokers/limits.py): run-time overrides and usage. The claim
-- (jobs.sql, job_claim) takes a slot; triggers on potatoq_jobs give it back (schema.sql).

-- name: limit_set
-- concurrency NULL removes the override: the max the tasks carry applies again. The key's
-- parked tasks go back to the ready line (the next claim parks those that still wait).
WITH set AS (
    INSERT INTO {schema}.potatoq_limits AS l (key, concurrency) VALUES (%(key)s, %(concurrency)s)
    ON CONFLICT (key) DO UPDATE SET concurrency = excluded.concurrency
    RETURNING l.key
)
UPDATE {schema}.potatoq_jobs SET parked = NULL
WHERE state = 1 AND parked AND limit_key = (SELECT key FROM set);

-- name: limit_usage
-- (key, limit, running, waiting, overridden) for every key with a row.
-- The waiting tasks are read through two partial indexes: ready in line, and parked.
WITH waiting AS MATERIALIZED (
    SELECT limit_key, limit_max FROM {schema}.potatoq_jobs
    WHERE state = 1 AND parked IS NULL AND limit_key IS NOT NULL
    UNION ALL
    SELECT limit_key, limit_max FROM {schema}.potatoq_jobs WHERE state = 1 AND parked
), per_key AS (
    SELECT limit_key AS key, max(limit_max) AS carried, count(*) AS waiting FROM waiting GROUP BY limit_key
)
SELECT l.key, coalesce(l.concurrency, l.carried, w.carried), l.running, coalesce(w.waiting, 0),
       l.concurrency IS NOT NULL
FROM {schema}.potatoq_limits AS l LEFT JOIN per_key AS w ON w.key = l.key
WHERE l.running > 0 OR l.concurrency IS NOT NULL OR w.key IS NOT NULL
UNION ALL
SELECT w.key, w.carried, 0, w.waiting, false
FROM per_key AS w
WHERE NOT EXISTS (SELECT FROM {schema}.potatoq_limits AS l WHERE l.key = w.key)
ORDER BY 1;

-- name: limit_unpark
-- The backstop of the hand-back (run by recovery, every few seconds per worker). A claim
-- that parks a key's tasks and a settle that frees the key's last slot can run at the same
-- time: the claim read the key as full, the settle's trigger can't see the rows the claim
-- is parking, and once both commit the tasks sit parked with the slot free and nothing to
-- wake them. Here each key with free slots gets that many of its best parked tasks back in
-- the ready line, and their queues are woken. The EXISTS probe (the parked-by-queue
-- index) keeps it to one index lookup when nothing is parked, the usual case.
WITH unparked AS (
    UPDATE {schema}.potatoq_jobs AS j SET parked = NULL
    WHERE j.id = ANY (ARRAY(
        SELECT p.id FROM {schema}.potatoq_limits AS l
        CROSS JOIN LATERAL (
            SELECT b.id FROM {schema}.potatoq_jobs AS b
            WHERE b.state = 1 AND b.parked AND b.limit_key = l.key
            ORDER BY b.priority DESC, b.seq
            LIMIT greatest(coalesce(l.concurrency, l.carried) - l.running, 0)
            FOR UPDATE SKIP LOCKED
        ) AS p
        WHERE EXISTS (SELECT FROM {schema}.potatoq_jobs WHERE state = 1 AND parked)
          AND l.running < coalesce(l.concurrency, l.carried)))
    RETURNING j.queue
), queues AS MATERIALIZED (
    SELECT DISTINCT queue FROM unparked
), notified AS MATERIALIZED (
    SELECT pg_notify(CASE WHEN octet_length(%(channel_prefix)s || queue) <= 63
                          THEN %(channel_prefix)s || queue
                          ELSE 'potatoq:' || md5(%(channel_prefix)s || queue) END, '')
    FROM queues WHERE %(notify)s
)
SELECT (SELECT count(*) FROM unparked) AS unparked, (SELECT count(*) FROM notified) AS notified;
