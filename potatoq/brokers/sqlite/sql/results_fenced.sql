-- Conditional result writes (see the fenced writes in potatoq/brokers/records.py): over a stored, unexpired
-- result the upsert applies only if that result's fence is not higher (a late write of an
-- older claim is refused) or, with :keep_ready, only if its state is not ready (revoke).

-- name: result_upsert_fenced
INSERT INTO potatoq_results (task_id, state, payload, expires_at)
VALUES (:task_id, :state, :payload, :expires_at)
ON CONFLICT (task_id) DO UPDATE
SET state = excluded.state, payload = excluded.payload, expires_at = excluded.expires_at
WHERE (potatoq_results.expires_at IS NOT NULL AND potatoq_results.expires_at <= :now)
   OR (:keep_ready AND potatoq_results.state NOT IN (SELECT value FROM json_each(:ready)))
   OR (NOT :keep_ready
       AND coalesce(json_extract(CAST(potatoq_results.payload AS TEXT), '$.fence'), 0) <= :fence);
