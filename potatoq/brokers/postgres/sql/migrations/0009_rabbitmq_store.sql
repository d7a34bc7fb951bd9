-- Migration 0009: the RabbitMQ broker's concurrency slots, rate tokens and unique keys, kept
-- here when this database is its result backend (potatoq/brokers/rabbitmq/store.py; the
-- statements are in potatoq/brokers/rabbitmq/sql/postgres.sql). Times are epoch
-- milliseconds of the server's clock. Each transition first locks its key's row, so the
-- claims of one key take turns and those of different keys don't wait for each other.

-- name: create_rmq_limits
-- One row per concurrency-limit key in use or overridden (the row a slot take locks).
CREATE TABLE {schema}.potatoq_rmq_limits (
    key      text PRIMARY KEY,
    carried  integer,  -- the max carried by the last task that tried for a slot
    override integer   -- potatoq limits set: the max over what the tasks carry
);

-- name: create_rmq_slots
-- A slot is a holder (a delivery's token) with a lease its process renews: a killed
-- process's slot stops counting once its lease has run out.
CREATE TABLE {schema}.potatoq_rmq_slots (
    key        text   NOT NULL,
    holder     text   NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (key, holder)
);

-- name: create_rmq_waits
-- Tasks parked for a slot (kind 'c') or a rate token (kind 'r'), listed as waiting in the
-- usage until they come back or their time runs out.
CREATE TABLE {schema}.potatoq_rmq_waits (
    kind  text   NOT NULL,
    key   text   NOT NULL,
    task  text   NOT NULL,
    until bigint NOT NULL,
    PRIMARY KEY (kind, key, task)
);

-- name: create_rmq_rates
-- GCRA state per rate key: the theoretical arrival time, the generation (a rate set at
-- run time starts a new one), what the tasks carry and the run-time override, in
-- milliseconds per token.
CREATE TABLE {schema}.potatoq_rmq_rates (
    key        text    PRIMARY KEY,
    tat        float8  NOT NULL DEFAULT 0,
    gen        bigint  NOT NULL DEFAULT 0,
    seen_step  float8,
    seen_burst integer,
    set_step   float8,
    set_burst  integer
);

-- name: create_rmq_unique
-- The task holding each unique key, until it is released or its TTL runs out.
CREATE TABLE {schema}.potatoq_rmq_unique (
    key        text   PRIMARY KEY,
    task       text   NOT NULL,
    expires_at bigint NOT NULL
);

-- name: create_rmq_unique_task_index
-- The release finds a task's key by its id.
CREATE INDEX potatoq_rmq_unique_task ON {schema}.potatoq_rmq_unique (task);

-- name: create_rmq_unique_expiry_index
-- Keys past their TTL, swept a few at a time.
CREATE INDEX potatoq_rmq_unique_expiry ON {schema}.potatoq_rmq_unique (expires_at);
