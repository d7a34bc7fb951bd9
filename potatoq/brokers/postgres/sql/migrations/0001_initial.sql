-- Migration 0001: the first schema of the PostgreSQL broker.
-- Migrations run in order, each in the transaction that holds the advisory lock, and are
-- recorded in potatoq_migrations. Never edit a released migration: add the next number and
-- change install/current.sql (the fresh install) to match.

-- name: create_jobs
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
CREATE INDEX potatoq_jobs_ready ON {schema}.potatoq_jobs (queue, priority DESC, seq) WHERE state = 1;

-- name: index_jobs_scheduled
CREATE INDEX potatoq_jobs_scheduled ON {schema}.potatoq_jobs (run_at) WHERE state = 0;

-- name: index_jobs_running
CREATE INDEX potatoq_jobs_running ON {schema}.potatoq_jobs (worker, pid) WHERE state = 2;

-- name: create_results
CREATE TABLE {schema}.potatoq_results (
    task_id     text        PRIMARY KEY,
    state       text        NOT NULL,
    record      bytea       NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- name: index_results_expiry
CREATE INDEX potatoq_results_expiry ON {schema}.potatoq_results (expires_at);

-- name: create_dead
CREATE TABLE {schema}.potatoq_dead (
    id          text        PRIMARY KEY,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
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

-- name: create_workers
CREATE TABLE {schema}.potatoq_workers (
    node        text        PRIMARY KEY,
    info        bytea       NOT NULL,
    last_seen   timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

-- name: create_chords
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
CREATE TABLE {schema}.potatoq_periodic (
    name        text             NOT NULL,
    fire_time   double precision NOT NULL,
    claimed_at  timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (name, fire_time)
);

-- name: index_periodic_claimed
CREATE INDEX potatoq_periodic_claimed ON {schema}.potatoq_periodic (claimed_at);;
