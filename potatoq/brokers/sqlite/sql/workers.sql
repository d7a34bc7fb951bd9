-- Worker heartbeats: one row per worker node, its WorkerInfo as JSON.

-- name: worker_heartbeat
INSERT INTO potatoq_workers (node, info, last_seen) VALUES (:node, :info, :now)
ON CONFLICT (node) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen;

-- name: worker_list
SELECT info, last_seen FROM potatoq_workers ORDER BY last_seen DESC;

-- name: worker_forget
DELETE FROM potatoq_workers WHERE node = :node;
