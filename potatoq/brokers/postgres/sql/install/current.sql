-- Fresh install of the PostgreSQL broker's schema: what the numbered migrations 0001..
-- produce, written out as one piece. tests/brokers/postgres/test_broker.py checks the two stay
-- equal. Each block is one statement; they run in order in the installing transaction.
-- {schema} is the quoted schema name.

-- name: create_jobs
-- The hot table: only scheduled (0), ready (1) and running (2) tasks. Finished tasks are
-- deleted, so the table stays small and its indexes short. Autovacuum runs after a fixed
-- number of dead rows with no cost delay: a queue table churns its whole content many
-- times a day, and a scale factor would let it bloat in proportion to its peak size.
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
    payload     bytea       NOT NULL,
    limit_key   text,       -- concurrency limit key (NULL: unlimited), set by potatoq_job_limit
    limit_max   integer,    -- ... and the max the task carries
    parked      boolean,    -- true: ready, waiting for a slot of its full key
    unique_key  text,       -- unique key the task holds (NULL: none), set by potatoq_job_unique
    unique_until timestamptz, -- ... released at this time whatever happens (NULL: never)
    unique_running boolean, -- ... true: held while running, false: released at start
    rate_key      text,     -- global rate limit key (NULL: unlimited), set by potatoq_job_rate
    rate_interval float8,   -- ... seconds per token the task carries
    rate_burst    integer,  -- ... and its burst
    rate_wait     boolean   -- true: scheduled by the claim for its key's next token
) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);

-- One partial index per state, each serving one hot query as a short index scan. The state
-- literal in each predicate is repeated literally in the queries (never a parameter), so
-- generic prepared plans still match the index.
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
-- In enqueue order (seq), so that a count past the stats cap is estimated from windows of it.
CREATE INDEX potatoq_jobs_parked_queue_seq ON {schema}.potatoq_jobs (queue, seq) WHERE state = 1 AND parked;

-- name: index_jobs_scheduled
CREATE INDEX potatoq_jobs_scheduled ON {schema}.potatoq_jobs (run_at) WHERE state = 0;

-- name: index_jobs_scheduled_queue
-- A queue's delayed tasks, for queue stats and purge (migrations 0005, 0010), in enqueue
-- order (seq), so that a count past the stats cap is estimated from windows of it.
CREATE INDEX potatoq_jobs_scheduled_queue_seq ON {schema}.potatoq_jobs (queue, seq) WHERE state = 0;

-- name: index_jobs_running
CREATE INDEX potatoq_jobs_running ON {schema}.potatoq_jobs (worker, pid) WHERE state = 2;

-- name: create_results
-- Results and task states, kept until expires_at (result_expires after they were written).
CREATE TABLE {schema}.potatoq_results (
    task_id     text        PRIMARY KEY,
    state       text        NOT NULL,
    record      bytea       NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- name: index_results_expiry
CREATE INDEX potatoq_results_expiry ON {schema}.potatoq_results (expires_at);

-- name: create_dead
-- Dead letters: the payload exactly as delivered, so a retry puts it back unchanged. Keyed
-- by seq, not by the task id: an id that dies twice keeps both letters (migration 0002).
CREATE TABLE {schema}.potatoq_dead (
    id          text        NOT NULL,
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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

-- name: index_dead_id
CREATE INDEX potatoq_dead_id ON {schema}.potatoq_dead (id);

-- name: create_workers
-- One row per worker node, rewritten by every heartbeat. Half of each page is left free and
-- no index covers info or last_seen, so each heartbeat is a HOT update: no index writes and
-- the old version is pruned within the page.
CREATE TABLE {schema}.potatoq_workers (
    node        text        PRIMARY KEY,
    info        bytea       NOT NULL,
    last_seen   timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

-- name: create_chords
-- Chords: a counter row per group (the upsert on it serializes concurrent joins) and one row
-- per distinct header part (its primary key makes a redelivered part count once).
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
-- Periodic fire times already sent: the primary key makes each (name, fire_time) win once.
CREATE TABLE {schema}.potatoq_periodic (
    name        text             NOT NULL,
    fire_time   double precision NOT NULL,
    claimed_at  timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (name, fire_time)
);

-- name: index_periodic_claimed
CREATE INDEX potatoq_periodic_claimed ON {schema}.potatoq_periodic (claimed_at);;

-- name: create_paused
-- Queues paused for the whole fleet (potatoq queues pause): workers re-read it, never claim.
CREATE TABLE {schema}.potatoq_paused (
    queue  text             PRIMARY KEY,
    since  double precision NOT NULL
);

-- Task history (migration 0004).

-- name: create_history
-- Times are epoch seconds (as the records carry them). Append-only but trimmed by
-- retention: autovacuum settings as for the other churning tables.
CREATE TABLE {schema}.potatoq_history (
    seq            bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id        text             NOT NULL,
    name           text,
    queue          text             NOT NULL,
    state          text             NOT NULL,
    finished_at    double precision NOT NULL,
    started_at     double precision,
    enqueued_at    double precision,
    due_at         double precision,
    runtime        double precision,
    worker         text,
    pid            integer,
    deliveries     integer          NOT NULL DEFAULT 0,
    retries        integer          NOT NULL DEFAULT 0,
    exc_type       text,
    exc_message    text,
    args_preview   text,
    result_preview text,
    parent_id      text,
    root_id        text,
    group_id       text
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);

-- name: index_history_task
CREATE INDEX potatoq_history_task ON {schema}.potatoq_history (task_id, seq);

-- name: index_history_name
CREATE INDEX potatoq_history_name ON {schema}.potatoq_history (name, seq);

-- name: index_history_state
CREATE INDEX potatoq_history_state ON {schema}.potatoq_history (state, seq);

-- name: index_history_queue
CREATE INDEX potatoq_history_queue ON {schema}.potatoq_history (queue, seq);

-- name: index_history_finished
CREATE INDEX potatoq_history_finished ON {schema}.potatoq_history (finished_at);

-- name: index_history_parent
-- The task page's chain and group links (migration 0012); partial: most rows have neither.
CREATE INDEX potatoq_history_parent ON {schema}.potatoq_history (parent_id, seq) WHERE parent_id IS NOT NULL;

-- name: index_history_group
CREATE INDEX potatoq_history_group ON {schema}.potatoq_history (group_id, seq) WHERE group_id IS NOT NULL;

-- name: index_history_exc
-- Exception-text search (migration 0013): the records that carry an exception, by seq and
-- by finish time; partial: successes cost them nothing.
CREATE INDEX potatoq_history_exc ON {schema}.potatoq_history (seq) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

-- name: index_history_exc_finished
CREATE INDEX potatoq_history_exc_finished ON {schema}.potatoq_history (finished_at, seq) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

-- Concurrency limits (migration 0006).

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

-- Unique tasks (migration 0007).

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

-- Global rate limits (migration 0008).

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

-- Per-minute rollups of task history (migration 0011).

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
