-- Migration 0008: global rate limits (potatoq/brokers/limits.py, the "rl" header).
-- A rate-limited task carries its key, seconds per token and burst in its row (read from
-- the payload by a trigger, as the concurrency limit is); potatoq_rates holds each key's
-- GCRA state. The claim takes a token with an upsert whose row lock serializes the claims
-- of one key; rate_defer moves the ready tasks of a key without a token to the scheduled
-- state at the times their tokens are expected.

-- name: add_jobs_rate_columns
ALTER TABLE {schema}.potatoq_jobs
    ADD COLUMN rate_key text, ADD COLUMN rate_interval float8, ADD COLUMN rate_burst integer,
    ADD COLUMN rate_wait boolean;

-- name: create_jobs_rated_index
-- Tasks of a rate key: what rate_defer moves when the key has no token, and usage counts.
CREATE INDEX potatoq_jobs_rated ON {schema}.potatoq_jobs (rate_key, state) WHERE rate_key IS NOT NULL;

-- name: create_rates
-- One row per rate key that took a token or has a run-time override; times in epoch seconds.
CREATE TABLE {schema}.potatoq_rates (
    key            text   PRIMARY KEY,
    tat            float8 NOT NULL DEFAULT 0,  -- GCRA theoretical arrival time
    next_at        float8 NOT NULL DEFAULT 0,  -- the next token: tat - (burst - 1) * token_secs
    defer_at       float8 NOT NULL DEFAULT 0,  -- where the next task moved to wait goes
    token_secs     float8,                     -- seconds per token and burst at the last take
    burst          integer,
    override_rate  float8,                     -- potatoq limits set-rate: tasks per second ...
    override_burst integer                     -- ... and burst, over what the tasks carry
);

-- name: create_rates_next_index
-- The keys without a token now: a short range at the end of the index.
CREATE INDEX potatoq_rates_next ON {schema}.potatoq_rates (next_at);

-- name: create_job_rate_function
-- Reads the rate limit a message carries ("rl": [key, per second, burst]) into the row, for
-- every way a row is written, as potatoq_job_limit does for "cl".
CREATE FUNCTION {schema}.potatoq_job_rate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rl jsonb;
BEGIN
    BEGIN
        rl := convert_from(NEW.payload, 'UTF8')::jsonb -> 'h' -> 'rl';
    EXCEPTION WHEN others THEN
        rl := NULL;  -- an undecodable payload is still delivered (and dead-lettered) unlimited
    END;
    IF jsonb_typeof(rl) = 'array' THEN
        NEW.rate_key := rl ->> 0;
        NEW.rate_interval := 1 / (rl ->> 1)::float8;
        NEW.rate_burst := (rl ->> 2)::integer;
    ELSE
        NEW.rate_key := NULL;
        NEW.rate_interval := NULL;
        NEW.rate_burst := NULL;
    END IF;
    RETURN NEW;
END
$$;

-- name: create_job_rate_trigger
-- The WHEN test is a byte search, so payloads without a rate never start the function.
CREATE TRIGGER potatoq_jobs_rate BEFORE INSERT OR UPDATE OF payload ON {schema}.potatoq_jobs
FOR EACH ROW WHEN (position('"rl":['::bytea IN NEW.payload) > 0 OR NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION {schema}.potatoq_job_rate();
