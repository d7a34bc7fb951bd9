-- Migration 0004: cluster-wide concurrency limits (potatoq/brokers/limits.py).
-- A limited task carries its limit key and max in its row; the slots in use are its running
-- rows, counted by the claim, so whatever ends a run (settle, recovery) frees the slot in
-- the same transaction and nothing can leak.

-- name: add_jobs_limit_key
ALTER TABLE potatoq_jobs ADD COLUMN limit_key TEXT;

-- name: add_jobs_limit_max
ALTER TABLE potatoq_jobs ADD COLUMN limit_max INTEGER;

-- name: add_jobs_parked
-- 1 while a ready task waits for a slot of its full key: out of the ready index, so a
-- backlog held back by a limit costs the claims of other tasks nothing.
ALTER TABLE potatoq_jobs ADD COLUMN parked INTEGER;

-- name: drop_jobs_ready_index
DROP INDEX potatoq_jobs_ready;
-- name: create_jobs_ready_index_unparked
-- The claim scan: one short index search per queue, best priority then oldest first.
CREATE INDEX potatoq_jobs_ready ON potatoq_jobs (queue, priority DESC, seq) WHERE state = 1 AND parked IS NULL;

-- name: create_jobs_limited_ready_index
-- Ready tasks of a limit key still in the ready line: what the claim parks when the key is full.
CREATE INDEX potatoq_jobs_limited_ready ON potatoq_jobs (limit_key)
WHERE state = 1 AND parked IS NULL AND limit_key IS NOT NULL;

-- name: create_jobs_parked_index
-- Parked tasks per key, in the order they go back to the ready line.
CREATE INDEX potatoq_jobs_parked ON potatoq_jobs (limit_key, priority DESC, seq) WHERE state = 1 AND parked = 1;

-- name: create_jobs_parked_queue_index
-- Parked tasks per queue: they still wait, so queue stats count them and purge deletes them.
CREATE INDEX potatoq_jobs_parked_queue ON potatoq_jobs (queue) WHERE state = 1 AND parked = 1;

-- name: create_slot_freed_update_trigger
-- A running limited task that becomes ready or scheduled again (requeue, retry, recovery)
-- frees a slot: its key's best parked task goes back to the ready line, in this transaction.
CREATE TRIGGER potatoq_jobs_slot_freed_update AFTER UPDATE OF state ON potatoq_jobs
WHEN OLD.state = 2 AND NEW.state <> 2 AND OLD.limit_key IS NOT NULL
BEGIN
    UPDATE potatoq_jobs SET parked = NULL
    WHERE seq = (SELECT seq FROM potatoq_jobs WHERE state = 1 AND parked = 1 AND limit_key = OLD.limit_key
                 ORDER BY priority DESC, seq LIMIT 1);
END;

-- name: create_slot_freed_delete_trigger
-- ... and so does one that finished or was dead-lettered (its row deleted).
CREATE TRIGGER potatoq_jobs_slot_freed_delete AFTER DELETE ON potatoq_jobs
WHEN OLD.state = 2 AND OLD.limit_key IS NOT NULL
BEGIN
    UPDATE potatoq_jobs SET parked = NULL
    WHERE seq = (SELECT seq FROM potatoq_jobs WHERE state = 1 AND parked = 1 AND limit_key = OLD.limit_key
                 ORDER BY priority DESC, seq LIMIT 1);
END;

-- name: create_jobs_limited_index
-- Running tasks per limit key: what the claim counts.
CREATE INDEX potatoq_jobs_limited ON potatoq_jobs (limit_key) WHERE state = 2 AND limit_key IS NOT NULL;

-- name: create_limits
-- Limits changed at run time (potatoq limits set): they override the max the tasks carry.
CREATE TABLE potatoq_limits (
    key         TEXT PRIMARY KEY,
    concurrency INTEGER NOT NULL
);
