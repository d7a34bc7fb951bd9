-- Migration 0011: per-minute rollups of task history, what the dashboard's charts read
-- (see potatoq.brokers.history_rollup). Written by the statement that inserts the records,
-- trimmed with them. Records from before this migration have none: the charts start from
-- the upgrade (the records themselves stay listed).

-- name: create_history_rollups
-- One row per (task name, span, minute since the epoch it starts at): span 1 (a minute)
-- or 60 (an hour, for charts of days); name '' holds every task's totals.
-- run_hist / lat_hist: a JSON object of count by bucket of runtime / latency samples. Every batch of
-- records updates its minute's '' row: autovacuum as for the other churning tables.
CREATE TABLE {schema}.potatoq_history_rollups (
    name     text             NOT NULL,
    span     integer          NOT NULL,
    minute   bigint           NOT NULL,
    success  integer          NOT NULL DEFAULT 0,
    failure  integer          NOT NULL DEFAULT 0,
    retry    integer          NOT NULL DEFAULT 0,
    revoked  integer          NOT NULL DEFAULT 0,
    dead     integer          NOT NULL DEFAULT 0,
    run_n    integer          NOT NULL DEFAULT 0,
    run_sum  double precision NOT NULL DEFAULT 0,
    run_hist jsonb            NOT NULL DEFAULT '{{}}',
    lat_n    integer          NOT NULL DEFAULT 0,
    lat_sum  double precision NOT NULL DEFAULT 0,
    lat_hist jsonb            NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (name, span, minute)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);

-- name: index_history_rollups_minute
-- The retention trim drops the oldest minutes and hours of every name.
CREATE INDEX potatoq_history_rollups_minute ON {schema}.potatoq_history_rollups (minute);
