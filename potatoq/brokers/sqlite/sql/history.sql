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
-- of them at once, is only planned by the tests). window: the index range a page walks
-- (text: the partial indexes of the records with an exception, whose predicate it repeats
-- word for word, so SQLite may use them); check: tested on each row read ("+" keeps SQLite
-- from walking that column's index).
SELECT seq FROM potatoq_history
WHERE seq < :cursor
  AND task_id = :task_id -- window: task_id
  AND name = :name -- window: name
  AND queue = :queue -- window: queue
  AND state = :state -- window: state
  AND finished_at >= :since -- window: since
  AND (exc_type IS NOT NULL OR exc_message IS NOT NULL) -- window: text
  AND +name = :name -- check: name
  AND +queue = :queue -- check: queue
  AND +state = :state -- check: state
  AND +finished_at >= :since -- check: since
  AND +finished_at < :until -- check: until
  AND instr(lower(coalesce(exc_type, '') || ' ' || coalesce(exc_message, '')), :text) > 0 -- check: text
ORDER BY seq DESC;

-- name: history_trim_age
DELETE FROM potatoq_history WHERE finished_at < :cutoff;

-- name: history_trim_count
-- Keep the newest :keep rows: those less than :keep seqs below the newest (two index
-- probes and the surplus rows, where an OFFSET walked :keep entries; seqs have no gaps
-- but those the age trim leaves below every kept row).
DELETE FROM potatoq_history
WHERE seq <= (SELECT max(seq) FROM potatoq_history) - :keep;

-- name: history_revoked
-- Run before job_revoke, in its transaction: the name and queue of a waiting task that
-- revoke removes (its REVOKED record is written like any other, rollup included).
SELECT task, queue FROM potatoq_jobs WHERE id = :id AND state IN (0, 1);

-- name: history_rollup_get
-- One (name, span, minute) rollup as stored: what a write merges its batch's into (in
-- Python, in the write's BEGIN IMMEDIATE transaction: no other writer in between; the
-- same merge in SQL, over json_each, cost ~130 us a row).
SELECT minute, success, failure, retry, revoked, dead, run_n, run_sum, run_hist, lat_n,
       lat_sum, lat_hist
FROM potatoq_history_rollups
WHERE name = ? AND span = ? AND minute = ?;

-- name: history_rollup_put
-- A merged rollup (history_rollup.rollup_row): name, span, minute, the five states, run n,
-- sum, hist, lat n, sum, hist.
INSERT OR REPLACE INTO potatoq_history_rollups (
    name, span, minute, success, failure, retry, revoked, dead, run_n, run_sum, run_hist, lat_n,
    lat_sum, lat_hist
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: history_rollups
-- The dashboard's charts: one name's ('' for every task) minutes or hours (:span) that
-- start in [:lo, :hi), on the primary key.
SELECT minute, success, failure, retry, revoked, dead, run_n, run_sum, run_hist, lat_n,
       lat_sum, lat_hist
FROM potatoq_history_rollups
WHERE name = :name AND span = :span AND minute >= :lo AND minute < :hi;

-- name: history_rollups_trim
-- Retention, after the records' trims: the minutes before the oldest record kept (or
-- before the age cutoff when none is), and the hours that ended before it, on the minute
-- index.
DELETE FROM potatoq_history_rollups
WHERE minute < coalesce(
    (SELECT CAST(min(finished_at) / 60 AS INTEGER) FROM potatoq_history),
    CAST(:cutoff / 60 AS INTEGER)
) -- the index range; then an hour's last minute must be before it too
  AND minute + span - 1 < coalesce(
    (SELECT CAST(min(finished_at) / 60 AS INTEGER) FROM potatoq_history),
    CAST(:cutoff / 60 AS INTEGER)
);

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
