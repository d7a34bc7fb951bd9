-- Migration 0007: unique tasks (potatoq/brokers/unique.py).
-- A unique task's row holds its key: with a unique index on it, an insert of a second row
-- with the key does nothing (every job insert is ON CONFLICT DO NOTHING), and whatever
-- deletes the row (settle, dead-letter, revoke, purge, recovery) releases the key in its
-- own transaction. A killed worker's task is put back by recovery still holding the key.

-- name: add_jobs_unique_columns
ALTER TABLE {schema}.potatoq_jobs
    ADD COLUMN unique_key text, ADD COLUMN unique_until timestamptz, ADD COLUMN unique_running boolean;

-- name: create_jobs_unique_index
-- One task per unique key.
CREATE UNIQUE INDEX potatoq_jobs_unique ON {schema}.potatoq_jobs (unique_key) WHERE unique_key IS NOT NULL;

-- name: create_job_unique_function
-- Reads the key a message carries (its "uq" header: [key, seconds, running]) into the row
-- for every way a row is inserted (enqueue, follow-ups, chord callbacks, periodic tasks,
-- dead letters retried), and first releases the key if its holder is past unique_until
-- (the backstop), so the insert's conflict check sees it free.
CREATE FUNCTION {schema}.potatoq_job_unique() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    uq jsonb;
BEGIN
    BEGIN
        uq := convert_from(NEW.payload, 'UTF8')::jsonb -> 'h' -> 'uq';
    EXCEPTION WHEN others THEN
        uq := NULL;  -- an undecodable payload is stored without a key
    END;
    IF jsonb_typeof(uq) = 'array' THEN
        NEW.unique_key := uq ->> 0;
        NEW.unique_until := now() + make_interval(secs => (uq ->> 1)::float8);
        NEW.unique_running := coalesce((uq ->> 2)::integer, 1) = 1;
        UPDATE {schema}.potatoq_jobs SET unique_key = NULL
        WHERE unique_key = NEW.unique_key AND unique_until <= now();
    ELSE
        NEW.unique_key := NULL;
        NEW.unique_until := NULL;
        NEW.unique_running := NULL;
    END IF;
    RETURN NEW;
END
$$;

-- name: create_job_unique_trigger
-- The WHEN test is a byte search, so payloads of plain tasks never start the function.
CREATE TRIGGER potatoq_jobs_unique BEFORE INSERT ON {schema}.potatoq_jobs
FOR EACH ROW WHEN (position('"uq":['::bytea IN NEW.payload) > 0)
EXECUTE FUNCTION {schema}.potatoq_job_unique();

-- name: create_unique_started_function
CREATE FUNCTION {schema}.potatoq_job_unique_started() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.unique_key := NULL;
    RETURN NEW;
END
$$;

-- name: create_unique_started_trigger
-- A task whose key is held only while it waits releases it when a claim starts it.
CREATE TRIGGER potatoq_jobs_unique_started BEFORE UPDATE OF state ON {schema}.potatoq_jobs
FOR EACH ROW WHEN (NEW.state = 2 AND NEW.unique_key IS NOT NULL AND NOT NEW.unique_running)
EXECUTE FUNCTION {schema}.potatoq_job_unique_started();
