-- A fresh install: the schema that migrations 0001..latest produce, created in one step.
-- Keep it equal to applying every migration in order (tests/brokers/sqlite/test_broker.py checks).
-- potatoq_jobs only ever holds scheduled (state 0), ready (1) and running (2) tasks;
-- finished tasks are deleted, so the hot table stays as small as the backlog.

-- name: create_jobs
CREATE TABLE potatoq_jobs (
    seq        INTEGER PRIMARY KEY,       -- rowid: FIFO order within a priority
    id         TEXT    NOT NULL UNIQUE,   -- the task id; enqueueing it twice is a no-op
    queue      TEXT    NOT NULL,
    task       TEXT,                      -- task name, for dead letters and stats (NULL for raw rows)
    priority   INTEGER NOT NULL DEFAULT 0,
    state      INTEGER NOT NULL,          -- 0 scheduled, 1 ready, 2 running
    run_at     REAL    NOT NULL,          -- epoch seconds when it is (or was) due
    deliveries INTEGER NOT NULL DEFAULT 0,
    token      INTEGER,                   -- fencing token of the current claim
    worker     TEXT,                      -- holder: worker node ...
    pid        INTEGER,                   -- ... and child pid
    claimed_at REAL,
    payload    BLOB    NOT NULL,          -- the encoded message, exactly as enqueued
    limit_key  TEXT,                      -- concurrency limit key (NULL: unlimited)
    limit_max  INTEGER,                   -- ... and the max the task carries
    parked     INTEGER,                   -- 1: ready, waiting for a slot of its full key
    unique_key TEXT,                      -- unique key the task holds (NULL: none)
    unique_until REAL,                    -- ... released at this time whatever happens
    unique_running INTEGER,               -- ... 1: held while running, 0: released at start
    rate_key      TEXT,                   -- global rate limit key (NULL: unlimited)
    rate_interval REAL,                   -- ... seconds per token the task carries
    rate_burst    INTEGER,                -- ... and its burst
    rate_wait     INTEGER                 -- 1: scheduled by the claim for its key's next token
);


-- name: create_jobs_scheduled_index
-- Far-future ETAs live only in this index, never in the ready scan.
CREATE INDEX potatoq_jobs_scheduled ON potatoq_jobs (queue, run_at) WHERE state = 0;

-- name: create_jobs_running_index
CREATE INDEX potatoq_jobs_running ON potatoq_jobs (worker, pid) WHERE state = 2;

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

-- name: create_limits
-- Limits changed at run time (potatoq limits set): they override the max the tasks carry.
CREATE TABLE potatoq_limits (
    key         TEXT PRIMARY KEY,
    concurrency INTEGER NOT NULL
);

-- name: create_results
CREATE TABLE potatoq_results (
    task_id    TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    payload    BLOB NOT NULL,             -- ResultRecord.encode()
    expires_at REAL                       -- NULL: never expires
);

-- name: create_results_expiry_index
CREATE INDEX potatoq_results_expiry ON potatoq_results (expires_at) WHERE expires_at IS NOT NULL;

-- name: create_dead
CREATE TABLE potatoq_dead (
    seq        INTEGER PRIMARY KEY,       -- newest first = highest seq
    id         TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    task       TEXT,
    priority   INTEGER NOT NULL DEFAULT 0,
    reason     TEXT    NOT NULL,
    payload    BLOB    NOT NULL,          -- unchanged, so retry puts back exactly what died
    deliveries INTEGER NOT NULL DEFAULT 0,
    died_at    REAL    NOT NULL
);

-- name: create_dead_id_index
CREATE INDEX potatoq_dead_id ON potatoq_dead (id);

-- name: create_dead_died_at_index
CREATE INDEX potatoq_dead_died_at ON potatoq_dead (died_at);

-- name: create_workers
CREATE TABLE potatoq_workers (
    node      TEXT PRIMARY KEY,
    info      BLOB NOT NULL,              -- WorkerInfo.encode(): JSON
    last_seen REAL NOT NULL
);

-- name: create_chords
CREATE TABLE potatoq_chords (
    group_id   TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    fired      INTEGER NOT NULL DEFAULT 0,  -- 1 once the callback was enqueued
    expires_at REAL
);

-- name: create_chords_expiry_index
CREATE INDEX potatoq_chords_expiry ON potatoq_chords (expires_at) WHERE expires_at IS NOT NULL;

-- name: create_chord_parts
CREATE TABLE potatoq_chord_parts (
    group_id TEXT    NOT NULL,
    idx      INTEGER NOT NULL,
    value    BLOB    NOT NULL,
    PRIMARY KEY (group_id, idx)
);

-- name: create_periodic
CREATE TABLE potatoq_periodic (
    name      TEXT NOT NULL,
    fire_time REAL NOT NULL,
    PRIMARY KEY (name, fire_time)
) WITHOUT ROWID;

-- name: create_paused
-- Queues paused for the whole fleet (potatoq queues pause): workers re-read it, never claim.
CREATE TABLE potatoq_paused (
    queue TEXT PRIMARY KEY,
    since REAL NOT NULL
) WITHOUT ROWID;

-- Task history (migration 0003).

-- name: create_history
CREATE TABLE potatoq_history (
    seq            INTEGER PRIMARY KEY,    -- insertion order: the keyset the pages walk
    task_id        TEXT    NOT NULL,
    name           TEXT,
    queue          TEXT    NOT NULL,
    state          TEXT    NOT NULL,       -- SUCCESS, FAILURE, RETRY, REVOKED or DEAD
    finished_at    REAL    NOT NULL,
    started_at     REAL,
    enqueued_at    REAL,
    due_at         REAL,
    runtime        REAL,
    worker         TEXT,
    pid            INTEGER,
    deliveries     INTEGER NOT NULL DEFAULT 0,
    retries        INTEGER NOT NULL DEFAULT 0,
    exc_type       TEXT,
    exc_message    TEXT,
    args_preview   TEXT,
    result_preview TEXT,
    parent_id      TEXT,
    root_id        TEXT,
    group_id       TEXT
);

-- name: create_history_task_index
CREATE INDEX potatoq_history_task ON potatoq_history (task_id, seq);

-- name: create_history_name_index
CREATE INDEX potatoq_history_name ON potatoq_history (name, seq);

-- name: create_history_state_index
CREATE INDEX potatoq_history_state ON potatoq_history (state, seq);

-- name: create_history_queue_index
CREATE INDEX potatoq_history_queue ON potatoq_history (queue, seq);

-- name: create_history_finished_index
CREATE INDEX potatoq_history_finished ON potatoq_history (finished_at);

-- name: create_history_parent_index
-- The task page's chain and group links (migration 0009); partial: most rows have neither.
CREATE INDEX potatoq_history_parent ON potatoq_history (parent_id, seq) WHERE parent_id IS NOT NULL;

-- name: create_history_group_index
CREATE INDEX potatoq_history_group ON potatoq_history (group_id, seq) WHERE group_id IS NOT NULL;

-- name: create_history_exc_index
-- Exception-text search (migration 0010): the records that carry an exception, by seq and
-- by finish time, with the text (checked on the index, no row read); partial: successes
-- cost them nothing.
CREATE INDEX potatoq_history_exc ON potatoq_history (seq, exc_type, exc_message) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

-- name: create_history_exc_finished_index
CREATE INDEX potatoq_history_exc_finished ON potatoq_history (finished_at, exc_type, exc_message) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

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

-- name: create_rmq_limits
-- One row per concurrency-limit key in use or overridden.
CREATE TABLE potatoq_rmq_limits (
    key      TEXT PRIMARY KEY,
    carried  INTEGER,  -- the max carried by the last task that tried for a slot
    override INTEGER   -- potatoq limits set: the max over what the tasks carry
);

-- name: create_rmq_slots
-- A slot is a holder (a delivery's token) with a lease its process renews: a killed
-- process's slot stops counting once its lease has run out.
CREATE TABLE potatoq_rmq_slots (
    key        TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (key, holder)
);

-- name: create_rmq_waits
-- Tasks parked for a slot (kind 'c') or a rate token (kind 'r'), listed as waiting in the
-- usage until they come back or their time runs out.
CREATE TABLE potatoq_rmq_waits (
    kind  TEXT    NOT NULL,
    key   TEXT    NOT NULL,
    task  TEXT    NOT NULL,
    until INTEGER NOT NULL,
    PRIMARY KEY (kind, key, task)
);

-- name: create_rmq_rates
-- GCRA state per rate key: the theoretical arrival time, the generation (a rate set at
-- run time starts a new one), what the tasks carry and the run-time override, in
-- milliseconds per token.
CREATE TABLE potatoq_rmq_rates (
    key        TEXT    PRIMARY KEY,
    tat        REAL    NOT NULL DEFAULT 0,
    gen        INTEGER NOT NULL DEFAULT 0,
    seen_step  REAL,
    seen_burst INTEGER,
    set_step   REAL,
    set_burst  INTEGER
);

-- name: create_rmq_unique
-- The task holding each unique key, until it is released or its TTL runs out.
CREATE TABLE potatoq_rmq_unique (
    key        TEXT    PRIMARY KEY,
    task       TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

-- name: create_rmq_unique_task_index
-- The release finds a task's key by its id.
CREATE INDEX potatoq_rmq_unique_task ON potatoq_rmq_unique (task);

-- name: create_rmq_unique_expiry_index
-- Keys past their TTL, swept a few at a time.
CREATE INDEX potatoq_rmq_unique_expiry ON potatoq_rmq_unique (expires_at);

-- Per-minute rollups of task history (migration 0008).

-- name: create_history_rollups
-- One row per (task name, span, minute since the epoch it starts at): span 1 (a minute)
-- or 60 (an hour, for charts of days); name '' holds every task's totals.
-- run_hist / lat_hist: JSON objects {"<bucket>": count} of runtime / latency samples.
CREATE TABLE potatoq_history_rollups (
    name     TEXT    NOT NULL,
    span     INTEGER NOT NULL,
    minute   INTEGER NOT NULL,
    success  INTEGER NOT NULL DEFAULT 0,
    failure  INTEGER NOT NULL DEFAULT 0,
    retry    INTEGER NOT NULL DEFAULT 0,
    revoked  INTEGER NOT NULL DEFAULT 0,
    dead     INTEGER NOT NULL DEFAULT 0,
    run_n    INTEGER NOT NULL DEFAULT 0,
    run_sum  REAL    NOT NULL DEFAULT 0,
    run_hist TEXT    NOT NULL DEFAULT '{}',
    lat_n    INTEGER NOT NULL DEFAULT 0,
    lat_sum  REAL    NOT NULL DEFAULT 0,
    lat_hist TEXT    NOT NULL DEFAULT '{}',
    PRIMARY KEY (name, span, minute)
) WITHOUT ROWID;

-- name: create_history_rollups_minute_index
-- The retention trim drops the oldest minutes and hours of every name.
CREATE INDEX potatoq_history_rollups_minute ON potatoq_history_rollups (minute);
