-- Schema bookkeeping: which numbered migrations (migrations/NNNN_*.sql) this file has had.

-- name: schema_create_migrations
CREATE TABLE IF NOT EXISTS potatoq_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
);

-- name: schema_version
SELECT coalesce(max(version), 0) FROM potatoq_migrations;

-- name: schema_has_jobs_table
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'potatoq_jobs';

-- name: schema_record_migration
INSERT INTO potatoq_migrations (version, name, applied_at) VALUES (:version, :name, :now);
