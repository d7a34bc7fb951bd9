-- Conditional result writes (see the fenced writes in potatoq/brokers/records.py): over a stored, unexpired
-- result the upsert applies only if that result's fence is not higher (a late write of an
-- older claim is refused) or, with keep_ready, only if its state is not ready (revoke).

-- name: result_store_fenced
INSERT INTO {schema}.potatoq_results AS r (task_id, state, record, expires_at)
VALUES (%(task_id)s, %(state)s, %(record)s, now() + make_interval(secs => %(result_expires)s::float8))
ON CONFLICT (task_id) DO UPDATE
SET state = excluded.state, record = excluded.record, expires_at = excluded.expires_at
WHERE r.expires_at <= now()
   OR (%(keep_ready)s AND NOT r.state = ANY(%(ready)s))
   OR (NOT %(keep_ready)s
       AND coalesce((convert_from(r.record, 'UTF8')::jsonb ->> 'fence')::bigint, 0) <= %(fence)s)
RETURNING 1;
