-- queue_stats(): counts that cost the same behind any backlog (potatoq/brokers/estimates.py).

-- name: stats_counts
-- One row per queue holding a waiting, scheduled or running task. The queue names come from
-- a skip-scan of each partial index (one probe per distinct queue: min(queue) above the
-- previous one), never a walk of its entries. Each count stops at :cap + 1 index entries
-- (LIMIT in a subquery), so one read costs at most a few caps of index entries per queue,
-- whatever the backlog; Python estimates a count that passed the cap. The oldest waiting
-- time is the earlier of the ready head (one probe) and the longest-due scheduled task (one
-- probe of the scheduled index).
WITH RECURSIVE
ready(q) AS (
    SELECT (SELECT min(queue) FROM potatoq_jobs WHERE state = 1 AND parked IS NULL)
    UNION ALL
    SELECT (SELECT min(queue) FROM potatoq_jobs WHERE state = 1 AND parked IS NULL AND queue > ready.q)
    FROM ready WHERE ready.q IS NOT NULL
),
scheduled(q) AS (
    SELECT (SELECT min(queue) FROM potatoq_jobs WHERE state = 0)
    UNION ALL
    SELECT (SELECT min(queue) FROM potatoq_jobs WHERE state = 0 AND queue > scheduled.q)
    FROM scheduled WHERE scheduled.q IS NOT NULL
),
parked(q) AS (
    SELECT (SELECT min(queue) FROM potatoq_jobs WHERE state = 1 AND parked = 1)
    UNION ALL
    SELECT (SELECT min(queue) FROM potatoq_jobs WHERE state = 1 AND parked = 1 AND queue > parked.q)
    FROM parked WHERE parked.q IS NOT NULL
),
running(q, n) AS (
    -- the running index holds one entry per claimed task: as many as the workers' slots
    SELECT queue, count(*) FROM potatoq_jobs WHERE state = 2 GROUP BY queue
),
names(q) AS (
    SELECT q FROM ready WHERE q IS NOT NULL
    UNION SELECT q FROM scheduled WHERE q IS NOT NULL
    UNION SELECT q FROM parked WHERE q IS NOT NULL
    UNION SELECT q FROM running
)
SELECT names.q,
       (SELECT count(*) FROM (SELECT 1 FROM potatoq_jobs
                              WHERE state = 1 AND parked IS NULL AND queue = names.q LIMIT :cap + 1)),
       (SELECT count(*) FROM (SELECT 1 FROM potatoq_jobs
                              WHERE state = 1 AND parked = 1 AND queue = names.q LIMIT :cap + 1)),
       (SELECT count(*) FROM (SELECT 1 FROM potatoq_jobs
                              WHERE state = 0 AND queue = names.q AND run_at <= :now LIMIT :cap + 1)),
       (SELECT count(*) FROM (SELECT 1 FROM potatoq_jobs
                              WHERE state = 0 AND queue = names.q AND run_at > :now LIMIT :cap + 1)),
       coalesce((SELECT n FROM running WHERE running.q = names.q), 0),
       (SELECT run_at FROM potatoq_jobs WHERE state = 1 AND parked IS NULL AND queue = names.q
        ORDER BY priority DESC, seq LIMIT 1),
       (SELECT min(run_at) FROM potatoq_jobs WHERE state = 0 AND queue = names.q)
FROM names ORDER BY names.q;

-- name: stats_seq_range
-- The rowid range of the jobs table (two b-tree probes), sampled by stats_sample.
-- (Two subqueries: min() and max() in one SELECT would walk an index.)
SELECT (SELECT min(seq) FROM potatoq_jobs), (SELECT max(seq) FROM potatoq_jobs);

-- name: stats_sample
-- The waiting rows in windows [start, start + :width) of the rowid range (:starts is a JSON
-- array), by queue and kind: each window is a rowid range read of the table, so the read
-- costs the windows' width, not the table's size.
SELECT j.queue,
       CASE WHEN j.state = 1 AND j.parked IS NULL THEN 'ready'
            WHEN j.state = 1 THEN 'parked'
            WHEN j.run_at <= :now THEN 'due'
            ELSE 'later' END AS kind,
       count(*)
FROM json_each(:starts) AS w CROSS JOIN potatoq_jobs AS j
WHERE j.seq >= w.value AND j.seq < w.value + :width AND j.state IN (0, 1)
GROUP BY 1, 2;
