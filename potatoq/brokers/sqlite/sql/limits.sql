-- Concurrency limits (potatoq/brokers/limits.py): run-time overrides and usage. The claim
-- itself (jobs.sql, job_claim) counts the running rows of a key against its limit.

-- name: limit_set
INSERT INTO potatoq_limits (key, concurrency) VALUES (:key, :concurrency)
ON CONFLICT (key) DO UPDATE SET concurrency = excluded.concurrency;

-- name: limit_clear
DELETE FROM potatoq_limits WHERE key = :key;

-- name: limit_usage
-- Every key with waiting or running tasks, or an override: (key, limit, running, waiting,
-- overridden).
WITH keys AS (
    SELECT limit_key AS key FROM potatoq_jobs WHERE limit_key IS NOT NULL AND state IN (1, 2)
    UNION SELECT key FROM potatoq_limits
)
SELECT k.key,
       coalesce(l.concurrency,
                (SELECT max(j.limit_max) FROM potatoq_jobs AS j WHERE j.limit_key = k.key)),
       (SELECT count(*) FROM potatoq_jobs AS j WHERE j.state = 2 AND j.limit_key = k.key),
       (SELECT count(*) FROM potatoq_jobs AS j WHERE j.state = 1 AND j.limit_key = k.key),
       l.concurrency IS NOT NULL
FROM keys AS k LEFT JOIN potatoq_limits AS l ON l.key = k.key
ORDER BY k.key;
