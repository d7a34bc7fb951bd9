-- Migration 0008: per-minute rollups of task history, what the dashboard's charts read
-- (see potatoq.brokers.history_rollup). Written in the transaction that inserts the
-- records, trimmed with them. Records from before this migration have none: the charts
-- start from the upgrade (the records themselves stay listed).

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
