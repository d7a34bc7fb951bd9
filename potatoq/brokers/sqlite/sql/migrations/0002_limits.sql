-- Migration 0002: cluster-wide concurrency limits (potatoq/brokers/limits.py).
-- A limited task carries its limit key and max in its row; the slots in use are its running
-- rows, counted by the claim, so whatever ends a run (settle, recovery) frees the slot in
-- the same transaction and nothing can leak.

-- name: add_jobs_limit_key
ALTER TABLE potatoq_jobs ADD COLUMN limit_key TEXT;

-- name: add_jobs_limit_max
ALTER TABLE potatoq_jobs ADD COLUMN limit_max INTEGER;

-- name: create_jobs_limited_index
-- Running tasks per limit key: what the claim counts.
CREATE INDEX potatoq_jobs_limited ON potatoq_jobs (limit_key) WHERE state = 2 AND limit_key IS NOT NULL;

-- name: create_limits
-- Limits changed at run time (potatoq limits set): they override the max the tasks carry.
CREATE TABLE potatoq_limits (
    key         TEXT PRIMARY KEY,
    concurrency INTEGER NOT NULL
);
