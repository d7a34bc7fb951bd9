-- queue_stats(): counts that cost the same behind any backlog (potatoq/brokers/estimates.py).

-- name: queue_stats_no_seqscan
-- Run before stats_counts in its transaction. Counting a queue that holds most of the table,
-- the planner may prefer a sequential scan of the heap (payloads and all) to the partial
-- index, notably while the visibility map lags; the index is never the slower choice here.
SET LOCAL enable_seqscan = off;

-- name: stats_counts
-- One row per queue holding a waiting, scheduled or running task. The queue names come from
-- a skip-scan of each partial index (one probe per distinct queue: min(queue) above the
-- previous one), never a walk of its entries. Each count is index-only and stops at
-- %(cap)s + 1 entries, so one read costs at most a few caps of index entries per queue,
-- whatever the backlog; Python estimates a count that passed the cap. oldest_waiting_age is
-- the age of the task at the head of each queue (one index probe per queue): the oldest
-- waiting task unless a newer one has a higher priority.
WITH RECURSIVE ready(q) AS (
    SELECT (SELECT min(queue) FROM {schema}.potatoq_jobs WHERE state = 1 AND parked IS NULL)
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.potatoq_jobs
            WHERE state = 1 AND parked IS NULL AND queue > ready.q)
    FROM ready WHERE ready.q IS NOT NULL
), scheduled(q) AS (
    SELECT (SELECT min(queue) FROM {schema}.potatoq_jobs WHERE state = 0)
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.potatoq_jobs WHERE state = 0 AND queue > scheduled.q)
    FROM scheduled WHERE scheduled.q IS NOT NULL
), parked(q) AS (
    SELECT (SELECT min(queue) FROM {schema}.potatoq_jobs WHERE state = 1 AND parked)
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.potatoq_jobs WHERE state = 1 AND parked AND queue > parked.q)
    FROM parked WHERE parked.q IS NOT NULL
), running AS MATERIALIZED (
    -- the running index holds one entry per claimed task: as many as the workers' slots
    SELECT queue AS q, count(*) AS n FROM {schema}.potatoq_jobs WHERE state = 2 GROUP BY queue
), names AS (
    SELECT q FROM ready WHERE q IS NOT NULL
    UNION SELECT q FROM scheduled WHERE q IS NOT NULL
    UNION SELECT q FROM parked WHERE q IS NOT NULL
    UNION SELECT q FROM running
)
SELECT names.q,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.potatoq_jobs
                              WHERE state = 1 AND parked IS NULL AND queue = names.q
                              LIMIT %(cap)s + 1) AS c),
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.potatoq_jobs
                              WHERE state = 1 AND parked AND queue = names.q
                              LIMIT %(cap)s + 1) AS c),
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.potatoq_jobs
                              WHERE state = 0 AND queue = names.q
                              LIMIT %(cap)s + 1) AS c),
       coalesce((SELECT n FROM running WHERE running.q = names.q), 0),
       (SELECT extract(epoch FROM now() - run_at)::float8 FROM {schema}.potatoq_jobs
        WHERE state = 1 AND parked IS NULL AND queue = names.q
        ORDER BY priority DESC, seq LIMIT 1)
FROM names ORDER BY names.q;

-- name: stats_table_size
-- The jobs table's pages now (pg_relation_size: the file's size, not the last ANALYZE's), to
-- size the sample. %(table)s is the table's quoted name.
SELECT pg_relation_size(%(table)s::regclass) / current_setting('block_size')::bigint;

-- name: stats_sample
-- The waiting rows on a random %(percent)s percent of the table's pages, by queue and kind
-- (TABLESAMPLE SYSTEM reads whole pages, so the read costs the sample, not the table).
SELECT queue,
       CASE WHEN state = 0 THEN 'scheduled' WHEN parked THEN 'parked' ELSE 'ready' END,
       count(*)
FROM {schema}.potatoq_jobs TABLESAMPLE SYSTEM (%(percent)s)
WHERE state IN (0, 1)
GROUP BY 1, 2;
