-- Migration 0004: task history (one row per finished delivery; see potatoq.brokers.history).
-- {schema} is the quoted schema name.

-- name: create_history
-- Times are epoch seconds (as the records carry them). Append-only but trimmed by
-- retention: autovacuum settings as for the other churning tables.
CREATE TABLE {schema}.potatoq_history (
    seq            bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id        text             NOT NULL,
    name           text,
    queue          text             NOT NULL,
    state          text             NOT NULL,
    finished_at    double precision NOT NULL,
    started_at     double precision,
    enqueued_at    double precision,
    due_at         double precision,
    runtime        double precision,
    worker         text,
    pid            integer,
    deliveries     integer          NOT NULL DEFAULT 0,
    retries        integer          NOT NULL DEFAULT 0,
    exc_type       text,
    exc_message    text,
    args_preview   text,
    result_preview text,
    parent_id      text,
    root_id        text,
    group_id       text
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);

-- name: index_history_task
CREATE INDEX potatoq_history_task ON {schema}.potatoq_history (task_id, seq);

-- name: index_history_name
CREATE INDEX potatoq_history_name ON {schema}.potatoq_history (name, seq);

-- name: index_history_state
CREATE INDEX potatoq_history_state ON {schema}.potatoq_history (state, seq);

-- name: index_history_queue
CREATE INDEX potatoq_history_queue ON {schema}.potatoq_history (queue, seq);

-- name: index_history_finished
CREATE INDEX potatoq_history_finished ON {schema}.potatoq_history (finished_at);
