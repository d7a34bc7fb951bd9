-- Task history: one row per finished delivery (see potatoq.brokers.history).

-- name: history_insert
-- Positional parameters, in this column order (history_sql.COLUMNS): cheaper to bind.
INSERT INTO potatoq_history (
    task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime, worker,
    pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview, parent_id,
    root_id, group_id
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: history_page
-- Keyset pagination on seq (newest first); :limit is one more than the page size, to tell
-- whether a next page exists. Not run as written: history_sql.compose puts the filters a
-- query sets (lines of history_filters) where the comments are.
SELECT seq, task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
       worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
       parent_id, root_id, group_id
FROM potatoq_history
WHERE seq < :cursor
  /*window*/
  /*floor*/
  /*checks*/
ORDER BY seq DESC
LIMIT :limit;

-- name: history_floor
-- The lowest seq a page with checks reads: the window's :scan_last + 1-th row.
SELECT seq FROM potatoq_history
WHERE seq < :cursor
  /*window*/
ORDER BY seq DESC
LIMIT 1 OFFSET :scan_last;

-- name: history_page_by_time
-- A page with a time range (and no task id): in finish time order, newest first, on the
-- finished_at index (keyset: finished_at, then seq among equal times). One upper bound,
-- time_top (the cursor's time or just below until, whichever is lower): with two, SQLite
-- may walk the index down from the higher one.
SELECT seq, task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
       worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
       parent_id, root_id, group_id
FROM potatoq_history
WHERE finished_at <= :time_top AND NOT (finished_at = :after_time AND seq >= :cursor)
  /*window*/
  /*floor*/
  /*checks*/
ORDER BY finished_at DESC, seq DESC
LIMIT :limit;

-- name: history_floor_by_time
-- The lowest (finished_at, seq) a time-ordered page with checks reads.
SELECT finished_at, seq FROM potatoq_history
WHERE finished_at <= :time_top AND NOT (finished_at = :after_time AND seq >= :cursor)
  /*window*/
ORDER BY finished_at DESC, seq DESC
LIMIT 1 OFFSET :scan_last;

-- name: history_filters
-- The filter lines history_sql.compose takes, by their trailing marker (this statement, all
-- of them at once, is only planned by the tests). window: the index range a page walks;
-- check: tested on each row read ("+" keeps SQLite from walking that column's index).
SELECT seq FROM potatoq_history
WHERE seq < :cursor
  AND task_id = :task_id -- window: task_id
  AND name = :name -- window: name
  AND queue = :queue -- window: queue
  AND state = :state -- window: state
  AND finished_at >= :since -- window: since
  AND +name = :name -- check: name
  AND +queue = :queue -- check: queue
  AND +state = :state -- check: state
  AND +finished_at >= :since -- check: since
  AND +finished_at < :until -- check: until
  AND instr(lower(coalesce(exc_type, '') || ' ' || coalesce(exc_message, '')), :text) > 0 -- check: text
ORDER BY seq DESC;

-- name: history_buckets
-- The dashboard's charts, in one pass over a finished_at index range: per bucket of :step
-- seconds from :start, the records, finished, failed, and the nearest-rank p50 and p95
-- (the ceil(q * n)-th smallest value) of latency and runtime.
WITH r AS (
    SELECT CAST((finished_at - :start) / :step AS INTEGER) AS b, state,
           CASE WHEN started_at IS NOT NULL AND enqueued_at IS NOT NULL
                THEN max(0.0, started_at - max(enqueued_at, coalesce(due_at, 0.0))) END AS latency,
           CASE WHEN started_at IS NOT NULL THEN runtime END AS run
    FROM potatoq_history
    WHERE finished_at >= :start AND finished_at < :end AND (:name IS NULL OR name = :name)
),
lat AS (
    SELECT b, max(CASE WHEN i = (n + 1) / 2 THEN v END) AS p50,
           max(CASE WHEN i = (95 * n + 99) / 100 THEN v END) AS p95
    FROM (SELECT b, latency AS v, row_number() OVER (PARTITION BY b ORDER BY latency) AS i,
                 count(*) OVER (PARTITION BY b) AS n
          FROM r WHERE latency IS NOT NULL)
    GROUP BY b
),
run AS (
    SELECT b, max(CASE WHEN i = (n + 1) / 2 THEN v END) AS p50,
           max(CASE WHEN i = (95 * n + 99) / 100 THEN v END) AS p95
    FROM (SELECT b, run AS v, row_number() OVER (PARTITION BY b ORDER BY run) AS i,
                 count(*) OVER (PARTITION BY b) AS n
          FROM r WHERE run IS NOT NULL)
    GROUP BY b
)
SELECT c.b, c.n, c.ok, c.bad, lat.p50, lat.p95, run.p50, run.p95
FROM (SELECT b, count(*) AS n, sum(state IN ('SUCCESS', 'REVOKED')) AS ok,
             sum(state IN ('FAILURE', 'DEAD')) AS bad
      FROM r GROUP BY b) AS c
LEFT JOIN lat ON lat.b = c.b
LEFT JOIN run ON run.b = c.b;

-- name: history_trim_age
DELETE FROM potatoq_history WHERE finished_at < :cutoff;

-- name: history_trim_count
-- Keep the newest :keep rows: those less than :keep seqs below the newest (two index
-- probes and the surplus rows, where an OFFSET walked :keep entries; seqs have no gaps
-- but those the age trim leaves below every kept row).
DELETE FROM potatoq_history
WHERE seq <= (SELECT max(seq) FROM potatoq_history) - :keep;

-- name: history_revoked
-- Run before job_revoke, in its transaction: a waiting task that revoke removes.
INSERT INTO potatoq_history (task_id, name, queue, state, finished_at)
SELECT id, task, queue, 'REVOKED', :now FROM potatoq_jobs WHERE id = :id AND state IN (0, 1);

-- name: history_links_parent
-- The records of the tasks that ran after :parent_id (chain steps, callbacks), newest first,
-- on the partial potatoq_history_parent index; history_links keeps each task's newest.
SELECT task_id, name, state, finished_at, parent_id, group_id FROM potatoq_history
WHERE parent_id = :parent_id
ORDER BY seq DESC
LIMIT :scan;

-- name: history_links_group
-- The records of the members of group (or chord header) :group_id, as above.
SELECT task_id, name, state, finished_at, parent_id, group_id FROM potatoq_history
WHERE group_id = :group_id
ORDER BY seq DESC
LIMIT :scan;
