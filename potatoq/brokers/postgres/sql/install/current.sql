-- Fresh install of the PostgreSQL broker's schema: what the numbered migrations 0001..
-- produce, written out as one piece. tests/brokers/postgres/test_broker.py checks the two stay
-- equal. Each block is one statement; they run in order in the installing transaction.
-- {schema} is the quoted schema name.

-- name: create_jobs
-- The hot table: only scheduled (0), ready (1) and running (2) tasks. Finished tasks are
-- deleted, so the table stays small and its indexes short. Autovacuum runs after a fixed
-- number of dead rows with no cost delay: a queue table churns its whole content many
-- times a day, and a scale factor would let it bloat in proportion to its peak size.
CREATE TABLE {schema}.potatoq_jobs (
    id          text        PRIMARY KEY,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    queue       text        NOT NULL,
    priority    integer     NOT NULL DEFAULT 0,
    state       smallint    NOT NULL CHECK (state IN (0, 1, 2)),
    run_at      timestamptz NOT NULL DEFAULT now(),
    deliveries  integer     NOT NULL DEFAULT 0,
    token       uuid,
    worker      text,
    pid         integer,
    claimed_at  timestamptz,
    payload     bytea       NOT NULL
) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);

-- name: index_jobs_ready
-- One partial index per state, each serving one hot query as a short index scan. The state
-- literal in each predicate is repeated literally in the queries (never a parameter), so
-- generic prepared plans still match the index.
CREATE INDEX potatoq_jobs_ready ON {schema}.potatoq_jobs (queue, priority DESC, seq) WHERE state = 1;

-- name: index_jobs_scheduled
CREATE INDEX potatoq_jobs_scheduled ON {schema}.potatoq_jobs (run_at) WHERE state = 0;

-- name: index_jobs_scheduled_queue
-- A queue's delayed tasks, for queue stats and purge (migration 0005).
CREATE INDEX potatoq_jobs_scheduled_queue ON {schema}.potatoq_jobs (queue) WHERE state = 0;

-- name: index_jobs_running
CREATE INDEX potatoq_jobs_running ON {schema}.potatoq_jobs (worker, pid) WHERE state = 2;

-- name: create_results
-- Results and task states, kept until expires_at (result_expires after they were written).
CREATE TABLE {schema}.potatoq_results (
    task_id     text        PRIMARY KEY,
    state       text        NOT NULL,
    record      bytea       NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- name: index_results_expiry
CREATE INDEX potatoq_results_expiry ON {schema}.potatoq_results (expires_at);

-- name: create_dead
-- Dead letters: the payload exactly as delivered, so a retry puts it back unchanged. Keyed
-- by seq, not by the task id: an id that dies twice keeps both letters (migration 0002).
CREATE TABLE {schema}.potatoq_dead (
    id          text        NOT NULL,
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text        NOT NULL,
    task        text,
    priority    integer     NOT NULL DEFAULT 0,
    reason      text        NOT NULL,
    payload     bytea       NOT NULL,
    deliveries  integer     NOT NULL DEFAULT 0,
    died_at     timestamptz NOT NULL DEFAULT now()
);

-- name: index_dead_died
CREATE INDEX potatoq_dead_died ON {schema}.potatoq_dead (died_at, seq);

-- name: index_dead_id
CREATE INDEX potatoq_dead_id ON {schema}.potatoq_dead (id);

-- name: create_workers
-- One row per worker node, rewritten by every heartbeat. Half of each page is left free and
-- no index covers info or last_seen, so each heartbeat is a HOT update: no index writes and
-- the old version is pruned within the page.
CREATE TABLE {schema}.potatoq_workers (
    node        text        PRIMARY KEY,
    info        bytea       NOT NULL,
    last_seen   timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

-- name: create_chords
-- Chords: a counter row per group (the upsert on it serializes concurrent joins) and one row
-- per distinct header part (its primary key makes a redelivered part count once).
CREATE TABLE {schema}.potatoq_chords (
    group_id    text        PRIMARY KEY,
    size        integer     NOT NULL,
    joined      integer     NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- name: index_chords_expiry
CREATE INDEX potatoq_chords_expiry ON {schema}.potatoq_chords (expires_at);

-- name: create_chord_parts
CREATE TABLE {schema}.potatoq_chord_parts (
    group_id    text        NOT NULL,
    idx         integer     NOT NULL,
    value       bytea       NOT NULL,
    PRIMARY KEY (group_id, idx)
);

-- name: create_periodic
-- Periodic fire times already sent: the primary key makes each (name, fire_time) win once.
CREATE TABLE {schema}.potatoq_periodic (
    name        text             NOT NULL,
    fire_time   double precision NOT NULL,
    claimed_at  timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (name, fire_time)
);

-- name: index_periodic_claimed
CREATE INDEX potatoq_periodic_claimed ON {schema}.potatoq_periodic (claimed_at);;

-- name: create_paused
-- Queues paused for the whole fleet (potatoq queues pause): workers re-read it, never claim.
CREATE TABLE {schema}.potatoq_paused (
    queue  text             PRIMARY KEY,
    since  double precision NOT NULL
);

-- Task history (migration 0004).

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
