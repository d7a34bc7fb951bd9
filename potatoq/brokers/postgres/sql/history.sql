-- Task history: one row per finished delivery (see potatoq.brokers.history).

-- name: history_insert
-- One row per element of the parallel arrays (a settle writes one, append_history many).
INSERT INTO {schema}.potatoq_history (
    task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime, worker,
    pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview, parent_id,
    root_id, group_id
)
SELECT * FROM unnest(
    %(task_id)s::text[], %(name)s::text[], %(queue)s::text[], %(state)s::text[],
    %(finished_at)s::float8[], %(started_at)s::float8[], %(enqueued_at)s::float8[],
    %(due_at)s::float8[], %(runtime)s::float8[], %(worker)s::text[], %(pid)s::int[],
    %(deliveries)s::int[], %(retries)s::int[], %(exc_type)s::text[], %(exc_message)s::text[],
    %(args_preview)s::text[], %(result_preview)s::text[], %(parent_id)s::text[],
    %(root_id)s::text[], %(group_id)s::text[]
);

-- name: history_page
-- Keyset pagination on seq (newest first); %(limit)s is one more than the page size, to
-- tell whether a next page exists. Not run as written: history_sql.compose puts the
-- filters a query sets (lines of history_filters) where the comments are.
SELECT seq, task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
       worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
       parent_id, root_id, group_id
FROM {schema}.potatoq_history
WHERE seq < %(cursor)s
  /*window*/
  /*floor*/
  /*checks*/
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: history_floor
-- The lowest seq a page with checks reads: the window's %(scan_last)s + 1-th row.
SELECT seq FROM {schema}.potatoq_history
WHERE seq < %(cursor)s
  /*window*/
ORDER BY seq DESC
LIMIT 1 OFFSET %(scan_last)s;

-- name: history_page_by_time
-- A page with a time range (and no task id): in finish time order, newest first, on the
-- finished_at index (keyset: finished_at, then seq among equal times). One upper bound,
-- time_top (the cursor's time or just below until, whichever is lower): with two, SQLite
-- may walk the index down from the higher one.
SELECT seq, task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
       worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
       parent_id, root_id, group_id
FROM {schema}.potatoq_history
WHERE finished_at <= %(time_top)s AND NOT (finished_at = %(after_time)s AND seq >= %(cursor)s)
  /*window*/
  /*floor*/
  /*checks*/
ORDER BY finished_at DESC, seq DESC
LIMIT %(limit)s;

-- name: history_floor_by_time
-- The lowest (finished_at, seq) a time-ordered page with checks reads.
SELECT finished_at, seq FROM {schema}.potatoq_history
WHERE finished_at <= %(time_top)s AND NOT (finished_at = %(after_time)s AND seq >= %(cursor)s)
  /*window*/
ORDER BY finished_at DESC, seq DESC
LIMIT 1 OFFSET %(scan_last)s;

-- name: history_filters
-- The filter lines history_sql.compose takes, by their trailing marker (this statement, all
-- of them at once, is only planned by the tests). window: the index range a page walks;
-- check: tested on each row read.
SELECT seq FROM {schema}.potatoq_history
WHERE seq < %(cursor)s
  AND task_id = %(task_id)s -- window: task_id
  AND name = %(name)s -- window: name
  AND queue = %(queue)s -- window: queue
  AND state = %(state)s -- window: state
  AND finished_at >= %(since)s -- window: since
  AND name = %(name)s -- check: name
  AND queue = %(queue)s -- check: queue
  AND state = %(state)s -- check: state
  AND finished_at >= %(since)s -- check: since
  AND finished_at < %(until)s -- check: until
  AND strpos(lower(coalesce(exc_type, '') || ' ' || coalesce(exc_message, '')), %(text)s) > 0 -- check: text
ORDER BY seq DESC;

-- name: history_buckets
-- The dashboard's charts, in one pass over a finished_at index range: per bucket of
-- %(step)s seconds from %(start)s, the records, finished, failed, and the nearest-rank p50
-- and p95 (percentile_disc: the ceil(q * n)-th smallest value) of latency and runtime.
WITH r AS (
    SELECT floor((finished_at - %(start)s) / %(step)s)::int AS b, state,
           CASE WHEN started_at IS NOT NULL AND enqueued_at IS NOT NULL
                THEN GREATEST(0.0, started_at - GREATEST(enqueued_at, coalesce(due_at, 0.0))) END AS latency,
           CASE WHEN started_at IS NOT NULL THEN runtime END AS run
    FROM {schema}.potatoq_history
    WHERE finished_at >= %(start)s AND finished_at < %(end)s
      AND (%(name)s::text IS NULL OR name = %(name)s)
)
SELECT b, count(*), count(*) FILTER (WHERE state IN ('SUCCESS', 'REVOKED')),
       count(*) FILTER (WHERE state IN ('FAILURE', 'DEAD')),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY latency),
       percentile_disc(0.95) WITHIN GROUP (ORDER BY latency),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY run),
       percentile_disc(0.95) WITHIN GROUP (ORDER BY run)
FROM r GROUP BY b;

-- name: history_trim
-- Retention: drop rows older than the cutoff, then those more than %(keep)s seqs below the
-- newest: two index probes and the surplus rows, however large the table (an OFFSET walked
-- %(keep)s index entries each time). seq gaps (rolled back inserts) only keep fewer rows.
WITH aged AS (
    DELETE FROM {schema}.potatoq_history WHERE finished_at < %(cutoff)s
)
DELETE FROM {schema}.potatoq_history
WHERE seq <= (SELECT max(seq) FROM {schema}.potatoq_history) - %(keep)s;

-- name: history_job_revoke
-- job_revoke returning what the REVOKED record needs (the task name is in the payload).
DELETE FROM {schema}.potatoq_jobs WHERE id = %(id)s AND state <> 2
RETURNING queue, payload;

-- name: history_links_parent
-- The records of the tasks that ran after %(parent_id)s (chain steps, callbacks), newest
-- first, on the partial potatoq_history_parent index; history_links keeps each task's newest.
SELECT task_id, name, state, finished_at, parent_id, group_id FROM {schema}.potatoq_history
WHERE parent_id = %(parent_id)s
ORDER BY seq DESC
LIMIT %(scan)s;

-- name: history_links_group
-- The records of the members of group (or chord header) %(group_id)s, as above.
SELECT task_id, name, state, finished_at, parent_id, group_id FROM {schema}.potatoq_history
WHERE group_id = %(group_id)s
ORDER BY seq DESC
LIMIT %(scan)s;
