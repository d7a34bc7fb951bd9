-- queue_stats(): counts that cost the same behind any backlog (potatoq/brokers/estimates.py).

-- name: queue_stats_settings
-- Run before stats_counts in its transaction. Counting a queue that holds most of the table,
-- the planner may prefer a sequential scan of the heap (payloads and all) to the partial
-- index, notably while the visibility map lags; the index is never the slower choice here.
-- And no JIT compilation: behind a million tasks the planner's row estimates put the counts
-- (which stop at the cap) above jit_inline_above_cost, and compiling took 888 ms of a
-- 1,004 ms read whose execution took 17 ms (2026-12-05, PostgreSQL 15, a loaded 2-core VM).
SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true);

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

-- The estimate of a count that passed the cap samples the queue's own index entries in windows
-- of seq, the enqueue order each index ends in (estimates.windowed_estimate): first the
-- range of seq to sample, then the entries in the windows. Every read is an index-only
-- probe or range, so it costs the windows and the entries in them, not the backlog, and
-- unlike a sample of the table's pages its error doesn't grow as the queue's share of the
-- table shrinks (a queue's rows cluster on pages: a 2.5 % queue came out 36 % low).

-- name: stats_range_ready
-- The ready line is ordered by priority first: its distinct priorities (a skip-scan, one
-- probe each), and the lowest and highest seq over them (two probes per priority).
WITH RECURSIVE prio(p) AS (
    SELECT (SELECT max(priority) FROM {schema}.potatoq_jobs
            WHERE state = 1 AND parked IS NULL AND queue = %(queue)s)
    UNION ALL
    SELECT (SELECT max(priority) FROM {schema}.potatoq_jobs
            WHERE state = 1 AND parked IS NULL AND queue = %(queue)s AND priority < prio.p)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT array_agg(p),
       min((SELECT min(seq) FROM {schema}.potatoq_jobs
            WHERE state = 1 AND parked IS NULL AND queue = %(queue)s AND priority = prio.p)),
       max((SELECT max(seq) FROM {schema}.potatoq_jobs
            WHERE state = 1 AND parked IS NULL AND queue = %(queue)s AND priority = prio.p))
FROM prio WHERE p IS NOT NULL;

-- name: stats_windows_ready
-- The entries in each window [start, start + width) of seq, one row per window, at every
-- priority (= ANY: one range of the index per priority, as priority precedes seq in its key).
SELECT (SELECT count(*) FROM {schema}.potatoq_jobs
        WHERE state = 1 AND parked IS NULL AND queue = %(queue)s
          AND priority = ANY(%(priorities)s::integer[])
          AND seq >= w.start AND seq < w.start + %(width)s)
FROM unnest(%(starts)s::bigint[]) AS w(start);

-- name: stats_range_scheduled
SELECT NULL::integer[],
       (SELECT min(seq) FROM {schema}.potatoq_jobs WHERE state = 0 AND queue = %(queue)s),
       (SELECT max(seq) FROM {schema}.potatoq_jobs WHERE state = 0 AND queue = %(queue)s);

-- name: stats_windows_scheduled
SELECT (SELECT count(*) FROM {schema}.potatoq_jobs
        WHERE state = 0 AND queue = %(queue)s AND seq >= w.start AND seq < w.start + %(width)s)
FROM unnest(%(starts)s::bigint[]) AS w(start);

-- name: stats_range_parked
SELECT NULL::integer[],
       (SELECT min(seq) FROM {schema}.potatoq_jobs WHERE state = 1 AND parked AND queue = %(queue)s),
       (SELECT max(seq) FROM {schema}.potatoq_jobs WHERE state = 1 AND parked AND queue = %(queue)s);

-- name: stats_windows_parked
SELECT (SELECT count(*) FROM {schema}.potatoq_jobs
        WHERE state = 1 AND parked AND queue = %(queue)s AND seq >= w.start AND seq < w.start + %(width)s)
FROM unnest(%(starts)s::bigint[]) AS w(start);
