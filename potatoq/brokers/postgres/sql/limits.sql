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
SELECT l.key, coalesce(l.concurrency, l.carried, (SELECT max(j.limit_max) FROM {schema}.potatoq_jobs AS j
                                                 WHERE j.limit_key = l.key)),
       l.running,
       (SELECT count(*) FROM {schema}.potatoq_jobs AS j WHERE j.state = 1 AND j.limit_key = l.key),
       l.concurrency IS NOT NULL
FROM {schema}.potatoq_limits AS l
WHERE l.running > 0 OR l.concurrency IS NOT NULL
   OR EXISTS (SELECT FROM {schema}.potatoq_jobs AS j WHERE j.state = 1 AND j.limit_key = l.key)
UNION ALL
SELECT j.limit_key, max(j.limit_max), 0, count(*), false
FROM {schema}.potatoq_jobs AS j
WHERE j.state = 1 AND j.limit_key IS NOT NULL
  AND NOT EXISTS (SELECT FROM {schema}.potatoq_limits AS l WHERE l.key = j.limit_key)
GROUP BY j.limit_key
ORDER BY 1;
