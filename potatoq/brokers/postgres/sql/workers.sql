-- Worker nodes' heartbeats. The upsert touches no indexed column once the row exists, so
-- it is a HOT update in the half-empty page (fillfactor 50).

-- name: worker_heartbeat
INSERT INTO {schema}.potatoq_workers AS w (node, info, last_seen)
VALUES (%(node)s, %(info)s, now())
ON CONFLICT (node) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen;

-- name: workers_list
SELECT info, extract(epoch FROM last_seen)::float8 AS last_seen
FROM {schema}.potatoq_workers
ORDER BY last_seen DESC;

-- name: worker_forget
DELETE FROM {schema}.potatoq_workers WHERE node = %(node)s;
