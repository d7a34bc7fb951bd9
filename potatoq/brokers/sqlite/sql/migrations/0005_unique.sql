-- Migration 0005: unique tasks (potatoq/brokers/unique.py).
-- A unique task's row holds its key: a unique index makes a second row with the key fail
-- its insert (ON CONFLICT DO NOTHING), and whatever deletes the row (settle, dead-letter,
-- revoke, purge) releases the key in that transaction. unique_until is the backstop.

-- name: add_jobs_unique_key
ALTER TABLE potatoq_jobs ADD COLUMN unique_key TEXT;

-- name: add_jobs_unique_until
ALTER TABLE potatoq_jobs ADD COLUMN unique_until REAL;

-- name: add_jobs_unique_running
ALTER TABLE potatoq_jobs ADD COLUMN unique_running INTEGER;

-- name: create_jobs_unique_index
-- One task per unique key.
CREATE UNIQUE INDEX potatoq_jobs_unique ON potatoq_jobs (unique_key) WHERE unique_key IS NOT NULL;

-- name: create_unique_released_at_start_trigger
-- A task whose key is held only while it waits (unique_running = 0) releases it when a
-- claim starts it, in the claim's transaction.
CREATE TRIGGER potatoq_jobs_unique_started AFTER UPDATE OF state ON potatoq_jobs
WHEN NEW.state = 2 AND NEW.unique_key IS NOT NULL AND NEW.unique_running = 0
BEGIN
    UPDATE potatoq_jobs SET unique_key = NULL WHERE seq = NEW.seq;
END;
