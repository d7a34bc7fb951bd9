-- Concurrency limits (potatoq/brokers/limits.py): run-time overrides and usage. The claim
-- itself (jobs.sql, job_claim) counts the running rows of a key against its limit.

-- name: limit_park_full
-- Before a claim: ready tasks of :queues whose key has every slot running leave the ready
-- index (parked = 1), so they cost later claims nothing. Only rows of full keys are
-- visited (the full keys come from the few running rows). A trigger puts one back when a
-- slot of its key is freed (migration 0004).
UPDATE potatoq_jobs SET parked = 1
WHERE state = 1 AND parked IS NULL
  AND limit_key IN (
      SELECT r.limit_key FROM potatoq_jobs AS r
      WHERE r.state = 2 AND r.limit_key IS NOT NULL
      GROUP BY r.limit_key
      HAVING count(*) >= coalesce((SELECT l.concurrency FROM potatoq_limits AS l WHERE l.key = r.limit_key),
                                  max(r.limit_max)))
  AND queue IN (SELECT value FROM json_each(:queues));

-- name: limit_unpark
-- A limit changed at run time: every parked task of :key goes back to the ready line (the
-- next claim parks again those that still have to wait).
UPDATE potatoq_jobs SET parked = NULL WHERE state = 1 AND parked = 1 AND limit_key = :key;

-- name: limit_set
INSERT INTO potatoq_limits (key, concurrency) VALUES (:key, :concurrency)
ON CONFLICT (key) DO UPDATE SET concurrency = excluded.concurrency;

-- name: limit_clear
DELETE FROM potatoq_limits WHERE key = :key;

-- name: limit_usage
-- Every key with waiting or running tasks, or an override: (key, limit, running, waiting,
-- overridden).
-- Each part reads one partial index: running, ready in line, parked.
WITH keys AS (
    SELECT limit_key AS key FROM potatoq_jobs WHERE state = 2 AND limit_key IS NOT NULL
    UNION SELECT limit_key FROM potatoq_jobs WHERE state = 1 AND parked IS NULL AND limit_key IS NOT NULL
    UNION SELECT limit_key FROM potatoq_jobs WHERE state = 1 AND parked = 1
    UNION SELECT key FROM potatoq_limits
)
SELECT k.key,
       coalesce(l.concurrency,
                (SELECT max(m) FROM (
                    SELECT j.limit_max AS m FROM potatoq_jobs AS j WHERE j.state = 2 AND j.limit_key = k.key
                    UNION ALL
                    SELECT j.limit_max FROM potatoq_jobs AS j
                    WHERE j.state = 1 AND j.parked IS NULL AND j.limit_key = k.key
                    UNION ALL
                    SELECT j.limit_max FROM potatoq_jobs AS j WHERE j.state = 1 AND j.parked = 1 AND j.limit_key = k.key))),
       (SELECT count(*) FROM potatoq_jobs AS j WHERE j.state = 2 AND j.limit_key = k.key),
       (SELECT count(*) FROM potatoq_jobs AS j WHERE j.state = 1 AND j.parked IS NULL AND j.limit_key = k.key)
       + (SELECT count(*) FROM potatoq_jobs AS j WHERE j.state = 1 AND j.parked = 1 AND j.limit_key = k.key),
       l.concurrency IS NOT NULL
FROM keys AS k LEFT JOIN potatoq_limits AS l ON l.key = k.key
ORDER BY k.key;
