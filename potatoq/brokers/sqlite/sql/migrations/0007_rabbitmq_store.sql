-- Migration 0007: the RabbitMQ broker's concurrency slots, rate tokens and unique keys, kept
-- here when this file is its result backend (potatoq/brokers/rabbitmq/store.py; the
-- statements are in potatoq/brokers/rabbitmq/sql/sqlite.sql). Times are epoch milliseconds
-- of the host's clock; every transition is one BEGIN IMMEDIATE transaction.

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
