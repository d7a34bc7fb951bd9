-- Schema bookkeeping: install on first use and upgrade, one schema at a time.

-- name: schema_installed
-- Whether the bookkeeping table exists. Checked without the lock first, so an installed
-- schema costs two cheap reads per process and no lock.
SELECT EXISTS (
    SELECT FROM pg_catalog.pg_tables
    WHERE schemaname = %(schema)s AND tablename = 'potatoq_migrations'
) AS installed;

-- name: schema_lock
-- Serializes installs and upgrades of this schema across every process and host; released
-- by the end of the transaction, so a crashed installer can never leave it held.
SELECT pg_advisory_xact_lock(hashtextextended('potatoq.migrate:' || %(schema)s, 0));

-- name: schema_create_schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: schema_create_versions
CREATE TABLE IF NOT EXISTS {schema}.potatoq_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: schema_applied
SELECT version FROM {schema}.potatoq_migrations ORDER BY version;

-- name: schema_record
INSERT INTO {schema}.potatoq_migrations (version, name) VALUES (%(version)s, %(name)s);
