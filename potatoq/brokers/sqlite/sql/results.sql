-- Task results, written in the same transaction as the ack; expired rows are removed lazily.

-- name: result_upsert
INSERT INTO potatoq_results (task_id, state, payload, expires_at)
VALUES (:task_id, :state, :payload, :expires_at)
ON CONFLICT (task_id) DO UPDATE
SET state = excluded.state, payload = excluded.payload, expires_at = excluded.expires_at;

-- name: result_get
SELECT payload FROM potatoq_results
WHERE task_id = :task_id AND (expires_at IS NULL OR expires_at > :now);

-- name: result_delete
DELETE FROM potatoq_results WHERE task_id = :task_id;
