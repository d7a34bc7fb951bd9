-- Worker heartbeats: one row per worker node, its WorkerInfo as JSON.

-- name: worker_heartbeat
INSERT INTO potatoq_workers (node, info, last_seen) VALUES (:node, :info, :now)
ON CONFLICT (node) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen;

-- name: worker_list
SELECT info, last_seen FROM potatoq_workers ORDER BY last_seen DESC;

-- name: worker_forget
DELETE FROM potatoq_workers WHERE node = :node;

-- name: worker_dead_exists
-- Cheap read before recover() takes the write lock: a node silent since :cutoff.
SELECT EXISTS (SELECT 1 FROM potatoq_workers WHERE last_seen < :cutoff);

-- name: worker_forget_dead
-- The rows of nodes silent since :cutoff that hold no running task any more: every run of a
-- worker is a new node id, so without this each dead run would stay listed forever. A node
-- whose tasks aren't recovered yet keeps its row (recovery reads its last heartbeat).
DELETE FROM potatoq_workers AS w
WHERE w.last_seen < :cutoff
  AND NOT EXISTS (SELECT 1 FROM potatoq_jobs AS j WHERE j.state = 2 AND j.worker = w.node);
