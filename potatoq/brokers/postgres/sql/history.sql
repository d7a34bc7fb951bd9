-- Task history: one row per finished delivery (see potatoq.brokers.history).

-- name: history_insert
-- One row per element of the parallel arrays (a settle writes one, append_history many),
-- and in the same statement (one transaction) their rollups: one row per (name, span,
-- minute) of the batch (history_rollup.rollups_of: sorted so, so concurrent batches lock
-- rows in one order), counts and sums added, histograms merged: the batch's buckets (a
-- few) added to the stored counts and laid over the stored object with || (a merge over
-- every stored bucket, jsonb_each and GROUP BY, cost several times more per row).
WITH inserted AS (
    INSERT INTO {schema}.potatoq_history (
        task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
        worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
        parent_id, root_id, group_id
    )
    SELECT * FROM unnest(
        %(task_id)s::text[], %(name)s::text[], %(queue)s::text[], %(state)s::text[],
        %(finished_at)s::float8[], %(started_at)s::float8[], %(enqueued_at)s::float8[],
        %(due_at)s::float8[], %(runtime)s::float8[], %(worker)s::text[], %(pid)s::int[],
        %(deliveries)s::int[], %(retries)s::int[], %(exc_type)s::text[], %(exc_message)s::text[],
        %(args_preview)s::text[], %(result_preview)s::text[], %(parent_id)s::text[],
        %(root_id)s::text[], %(group_id)s::text[]
    )
)
INSERT INTO {schema}.potatoq_history_rollups AS r (
    name, span, minute, success, failure, retry, revoked, dead, run_n, run_sum, run_hist, lat_n,
    lat_sum, lat_hist
)
SELECT name, span, minute, success, failure, retry, revoked, dead, run_n, run_sum, run_hist,
       lat_n, lat_sum, lat_hist
FROM unnest(
    %(r_name)s::text[], %(r_span)s::int[], %(r_minute)s::bigint[], %(r_success)s::int[], %(r_failure)s::int[],
    %(r_retry)s::int[], %(r_revoked)s::int[], %(r_dead)s::int[], %(r_run_n)s::int[],
    %(r_run_sum)s::float8[], %(r_run_hist)s::jsonb[], %(r_lat_n)s::int[],
    %(r_lat_sum)s::float8[], %(r_lat_hist)s::jsonb[]
) WITH ORDINALITY AS u(name, span, minute, success, failure, retry, revoked, dead, run_n, run_sum,
                       run_hist, lat_n, lat_sum, lat_hist, o)
ORDER BY o
ON CONFLICT (name, span, minute) DO UPDATE SET
    success = r.success + excluded.success,
    failure = r.failure + excluded.failure,
    retry = r.retry + excluded.retry,
    revoked = r.revoked + excluded.revoked,
    dead = r.dead + excluded.dead,
    run_n = r.run_n + excluded.run_n,
    run_sum = r.run_sum + excluded.run_sum,
    run_hist = CASE WHEN excluded.run_n = 0 THEN r.run_hist ELSE r.run_hist || (
        SELECT jsonb_object_agg(k, coalesce((r.run_hist ->> k)::bigint, 0) + v::bigint)
        FROM jsonb_each_text(excluded.run_hist) AS e(k, v)
    ) END,
    lat_n = r.lat_n + excluded.lat_n,
    lat_sum = r.lat_sum + excluded.lat_sum,
    lat_hist = CASE WHEN excluded.lat_n = 0 THEN r.lat_hist ELSE r.lat_hist || (
        SELECT jsonb_object_agg(k, coalesce((r.lat_hist ->> k)::bigint, 0) + v::bigint)
        FROM jsonb_each_text(excluded.lat_hist) AS e(k, v)
    ) END;

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
-- of them at once, is only planned by the tests). window: the index range a page walks
-- (text: the partial indexes of the records with an exception, whose predicate it
-- repeats); check: tested on each row read.
SELECT seq FROM {schema}.potatoq_history
WHERE seq < %(cursor)s
  AND task_id = %(task_id)s -- window: task_id
  AND name = %(name)s -- window: name
  AND queue = %(queue)s -- window: queue
  AND state = %(state)s -- window: state
  AND finished_at >= %(since)s -- window: since
  AND (exc_type IS NOT NULL OR exc_message IS NOT NULL) -- window: text
  AND name = %(name)s -- check: name
  AND queue = %(queue)s -- check: queue
  AND state = %(state)s -- check: state
  AND finished_at >= %(since)s -- check: since
  AND finished_at < %(until)s -- check: until
  AND strpos(lower(coalesce(exc_type, '') || ' ' || coalesce(exc_message, '')), %(text)s) > 0 -- check: text
ORDER BY seq DESC;

-- name: history_rollups
-- The dashboard's charts: one name's ('' for every task) minutes or hours (span) that
-- start in [lo, hi), on the primary key.
SELECT minute, success, failure, retry, revoked, dead, run_n, run_sum, run_hist, lat_n,
       lat_sum, lat_hist
FROM {schema}.potatoq_history_rollups
WHERE name = %(name)s AND span = %(span)s AND minute >= %(lo)s AND minute < %(hi)s;

-- name: history_trim
-- Retention: drop rows older than the cutoff, then those more than %(keep)s seqs below the
-- newest: two index probes and the surplus rows, however large the table (an OFFSET walked
-- %(keep)s index entries each time). seq gaps (rolled back inserts) only keep fewer rows.
WITH aged AS (
    DELETE FROM {schema}.potatoq_history WHERE finished_at < %(cutoff)s
)
DELETE FROM {schema}.potatoq_history
WHERE seq <= (SELECT max(seq) FROM {schema}.potatoq_history) - %(keep)s;

-- name: history_rollups_trim
-- Retention, after the records' trim: the minutes before the oldest record kept (or before
-- the age cutoff when none is), and the hours that ended before it, on the minute index.
DELETE FROM {schema}.potatoq_history_rollups
WHERE minute < coalesce(
    (SELECT floor(min(finished_at) / 60)::bigint FROM {schema}.potatoq_history),
    floor(%(cutoff)s / 60)::bigint
) -- the index range; then an hour's last minute must be before it too
  AND minute + span - 1 < coalesce(
    (SELECT floor(min(finished_at) / 60)::bigint FROM {schema}.potatoq_history),
    floor(%(cutoff)s / 60)::bigint
);

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
