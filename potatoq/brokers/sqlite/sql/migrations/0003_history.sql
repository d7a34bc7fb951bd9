-- Migration 0003: task history (one row per finished delivery; see potatoq.brokers.history).

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
