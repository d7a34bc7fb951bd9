-- Results: one row per task id, overwritten by each state change, expiring at expires_at.
-- Rows past expires_at are invisible at once and deleted later by maintenance_sweep.

-- name: result_store
INSERT INTO {schema}.potatoq_results AS r (task_id, state, record, expires_at)
VALUES (%(task_id)s, %(state)s, %(record)s, now() + make_interval(secs => %(result_expires)s::float8))
ON CONFLICT (task_id) DO UPDATE
SET state = excluded.state, record = excluded.record, expires_at = excluded.expires_at;

-- name: result_get
SELECT record FROM {schema}.potatoq_results
WHERE task_id = %(task_id)s AND expires_at > now();

-- name: result_forget
DELETE FROM {schema}.potatoq_results WHERE task_id = %(task_id)s;
