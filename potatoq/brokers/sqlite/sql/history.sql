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
-- whether a next page exists. A NULL filter matches everything.
SELECT seq, task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
       worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
       parent_id, root_id, group_id
FROM potatoq_history
WHERE seq < :cursor
  AND (:name IS NULL OR name = :name)
  AND (:state IS NULL OR state = :state)
  AND (:queue IS NULL OR queue = :queue)
  AND (:task_id IS NULL OR task_id = :task_id)
  AND (:since IS NULL OR finished_at >= :since)
  AND (:until IS NULL OR finished_at < :until)
  AND (:text IS NULL OR instr(lower(coalesce(exc_type, '') || ' ' || coalesce(exc_message, '')), :text) > 0)
ORDER BY seq DESC
LIMIT :limit;

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
