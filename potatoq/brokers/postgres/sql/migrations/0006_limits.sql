-- Migration 0006: cluster-wide concurrency limits (potatoq/brokers/limits.py).

-- name: add_jobs_limit_columns
ALTER TABLE {schema}.potatoq_jobs
    ADD COLUMN limit_key text, ADD COLUMN limit_max integer, ADD COLUMN parked boolean;

-- name: drop_jobs_ready_index
DROP INDEX {schema}.potatoq_jobs_ready;

-- name: create_jobs_ready_index_unparked
-- The claim scan. Ready tasks parked behind a full limit key are not in it, so a backlog
-- held back by a limit costs the claims of other tasks nothing.
CREATE INDEX potatoq_jobs_ready ON {schema}.potatoq_jobs (queue, priority DESC, seq)
WHERE state = 1 AND parked IS NULL;

-- name: create_jobs_limited_ready_index
-- Ready tasks of a limit key still in the ready line: what the claim parks when it is full.
CREATE INDEX potatoq_jobs_limited_ready ON {schema}.potatoq_jobs (limit_key)
WHERE state = 1 AND parked IS NULL AND limit_key IS NOT NULL;

-- name: create_jobs_parked_index
-- Parked tasks per key, in the order they go back to the ready line.
CREATE INDEX potatoq_jobs_parked ON {schema}.potatoq_jobs (limit_key, priority DESC, seq)
WHERE state = 1 AND parked;

-- name: create_jobs_parked_queue_index
-- Parked tasks per queue: they still wait, so queue stats count them and purge deletes them.
CREATE INDEX potatoq_jobs_parked_queue ON {schema}.potatoq_jobs (queue) WHERE state = 1 AND parked;

-- name: create_limits
-- One row per concurrency limit key: the slots in use (running), the max its tasks carry
-- and a run-time override (potatoq limits set). The claim takes a slot with an upsert on
-- this row (whose row lock serializes claims of one key); a trigger gives it back when the
-- running row leaves state 2, in the same transaction as whatever ended the run.
CREATE TABLE {schema}.potatoq_limits (
    key         text    PRIMARY KEY,
    running     integer NOT NULL DEFAULT 0,
    carried     integer,
    concurrency integer
);

-- name: create_job_limit_function
-- Reads the limit a message carries (its "cl" header, potatoq/brokers/limits.py) into the
-- row, for every way a row is written (enqueue, follow-ups, chord callbacks, retries, dead
-- letters retried) without each statement having to pass it.
CREATE FUNCTION {schema}.potatoq_job_limit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cl jsonb;
BEGIN
    BEGIN
        cl := convert_from(NEW.payload, 'UTF8')::jsonb -> 'h' -> 'cl';
    EXCEPTION WHEN others THEN
        cl := NULL;  -- an undecodable payload is still delivered (and dead-lettered) unlimited
    END;
    IF jsonb_typeof(cl) = 'array' THEN
        NEW.limit_key := cl ->> 0;
        NEW.limit_max := (cl ->> 1)::integer;
    ELSE
        NEW.limit_key := NULL;
        NEW.limit_max := NULL;
    END IF;
    RETURN NEW;
END
$$;

-- name: create_job_limit_trigger
-- The WHEN test is a byte search, so payloads without a limit never start the function.
CREATE TRIGGER potatoq_jobs_limit BEFORE INSERT OR UPDATE OF payload ON {schema}.potatoq_jobs
FOR EACH ROW WHEN (position('"cl":['::bytea IN NEW.payload) > 0 OR NEW.limit_key IS NOT NULL)
EXECUTE FUNCTION {schema}.potatoq_job_limit();

-- name: create_slot_free_function
-- Gives the slot back and puts the key's best parked task back in the ready line.
CREATE FUNCTION {schema}.potatoq_job_slot_free() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {schema}.potatoq_limits SET running = greatest(running - 1, 0) WHERE key = OLD.limit_key;
    UPDATE {schema}.potatoq_jobs SET parked = NULL
    WHERE id = (SELECT id FROM {schema}.potatoq_jobs
                WHERE state = 1 AND parked AND limit_key = OLD.limit_key
                ORDER BY priority DESC, seq LIMIT 1 FOR UPDATE SKIP LOCKED);
    RETURN NULL;
END
$$;

-- name: create_slot_free_on_update
-- A running limited task made ready or scheduled again (requeue, retry, recovery).
CREATE TRIGGER potatoq_jobs_slot_free_update AFTER UPDATE OF state ON {schema}.potatoq_jobs
FOR EACH ROW WHEN (OLD.state = 2 AND NEW.state <> 2 AND OLD.limit_key IS NOT NULL)
EXECUTE FUNCTION {schema}.potatoq_job_slot_free();

-- name: create_slot_free_on_delete
-- A running limited task finished, dead-lettered, or dead-lettered by recovery.
CREATE TRIGGER potatoq_jobs_slot_free_delete AFTER DELETE ON {schema}.potatoq_jobs
FOR EACH ROW WHEN (OLD.state = 2 AND OLD.limit_key IS NOT NULL)
EXECUTE FUNCTION {schema}.potatoq_job_slot_free();
