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
