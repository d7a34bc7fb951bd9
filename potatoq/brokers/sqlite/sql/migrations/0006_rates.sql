-- Migration 0006: global rate limits (potatoq/brokers/limits.py, the ``rl`` header).
-- A rate-limited task carries its rate key, interval (seconds per token) and burst in its
-- row; potatoq_rates holds each key's GCRA state. The claim takes a token, or moves the
-- key's ready tasks to the scheduled state at the time their tokens are expected.

-- name: add_jobs_rate_key
ALTER TABLE potatoq_jobs ADD COLUMN rate_key TEXT;

-- name: add_jobs_rate_interval
ALTER TABLE potatoq_jobs ADD COLUMN rate_interval REAL;

-- name: add_jobs_rate_burst
ALTER TABLE potatoq_jobs ADD COLUMN rate_burst INTEGER;

-- name: add_jobs_rate_wait
-- 1 while the task is scheduled by the claim for its key's next token (not by an ETA).
ALTER TABLE potatoq_jobs ADD COLUMN rate_wait INTEGER;

-- name: create_jobs_rated_index
-- Tasks of a rate key: what the claim moves when the key has no token, and usage counts.
CREATE INDEX potatoq_jobs_rated ON potatoq_jobs (rate_key, state) WHERE rate_key IS NOT NULL;

-- name: create_rates
-- One row per rate key that took a token or has a run-time override.
CREATE TABLE potatoq_rates (
    key            TEXT PRIMARY KEY,
    tat            REAL NOT NULL DEFAULT 0,  -- GCRA theoretical arrival time (epoch seconds)
    next_at        REAL NOT NULL DEFAULT 0,  -- when the next token is due: tat - (burst - 1) * interval
    defer_at       REAL NOT NULL DEFAULT 0,  -- where the next task moved to wait for a token goes
    token_secs     REAL,                     -- seconds per token and burst at the last take
    burst          INTEGER,
    override_rate  REAL,                     -- potatoq limits set-rate: tasks per second ...
    override_burst INTEGER                   -- ... and burst, over what the tasks carry
);

-- name: create_rates_next_index
-- The keys without a token now: a short range at the end of the index.
CREATE INDEX potatoq_rates_next ON potatoq_rates (next_at);
