-- The life of a task in potatoq_jobs: enqueue, promote, claim, settle, recover.
--
-- Conventions: {schema} is the quoted schema name. Batches of messages are passed as
-- parallel arrays m_ids, m_queues, m_priorities, m_etas (epoch seconds or NULL = now) and
-- m_payloads; NOTIFY channels are computed by the caller (wakeups.channel_name) and passed as
-- an array, except where the queues are only known inside the statement (promote, recover,
-- dead_retry), which build the same name from channel_prefix. States are literals:
-- 0 scheduled, 1 ready, 2 running.

-- name: job_enqueue
-- Insert messages and NOTIFY their queues in one statement: a single delay() is one round
-- trip and one transaction. An id that is already waiting or running is left alone, and
-- so is a unique task whose key is held (its key is set by potatoq_job_unique); with
-- unique, the ids inserted come back (postgres/unique.py).
-- A batch comes as the m_* arrays (and channels) with the scalars NULL; a single message
-- as the scalars (id, queue, priority, eta, payload, channel: NULL for no NOTIFY) with the
-- arrays NULL, because psycopg adapts an array parameter in Python (about 25 us each).
WITH inserted AS (
    INSERT INTO {schema}.potatoq_jobs (id, queue, priority, state, run_at, payload)
    SELECT m.id, m.queue, m.priority,
           CASE WHEN to_timestamp(m.eta) > now() THEN 0 ELSE 1 END,
           coalesce(to_timestamp(m.eta), now()),
           m.payload
    FROM unnest(coalesce(%(m_ids)s::text[], ARRAY[%(id)s::text]),
                coalesce(%(m_queues)s::text[], ARRAY[%(queue)s::text]),
                coalesce(%(m_priorities)s::integer[], ARRAY[%(priority)s::integer]),
                coalesce(%(m_etas)s::float8[], ARRAY[%(eta)s::float8]),
                coalesce(%(m_payloads)s::bytea[], ARRAY[%(payload)s::bytea]))
         WITH ORDINALITY AS m(id, queue, priority, eta, payload, ord)
    ORDER BY m.ord
    ON CONFLICT DO NOTHING
    RETURNING id
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, '')
    FROM unnest(coalesce(%(channels)s::text[], ARRAY[%(channel)s::text])) AS channel
    WHERE channel IS NOT NULL AND EXISTS (SELECT FROM inserted)
), announced AS MATERIALIZED (
    -- due_channels (inside a caller's transaction only, else NULL): queues of tasks that
    -- fall due soon, announced at that transaction's commit (see wakeups.DUE_PAYLOAD)
    SELECT pg_notify(channel, 'due') FROM unnest(%(due_channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM inserted)
)
SELECT (SELECT count(*) FROM inserted) AS inserted,
       (SELECT count(*) FROM notified) + (SELECT count(*) FROM announced) AS notified,
       CASE WHEN %(unique)s::boolean THEN ARRAY(SELECT id FROM inserted) END AS ids;

-- name: job_promote
-- Make due scheduled tasks ready, then NOTIFY each affected queue once; also say when the
-- next one falls due. SKIP LOCKED lets
-- every worker run this concurrently; the scan only touches due rows of the state = 0
-- index, never far-future ones, and never the ready index. A promoted task gets a new seq
-- so it queues behind tasks that were ready before it.
WITH due AS MATERIALIZED (
    SELECT id FROM {schema}.potatoq_jobs
    WHERE state = 0 AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    -- = ANY (ARRAY(...)): one primary-key probe per due row, never a hash join that reads
    -- the whole table (what the planner picks for a small one)
    UPDATE {schema}.potatoq_jobs AS j SET state = 1, seq = DEFAULT
    WHERE j.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING j.queue
), queues AS MATERIALIZED (
    SELECT queue, count(*) AS n FROM promoted GROUP BY queue
), notified AS MATERIALIZED (
    SELECT pg_notify(CASE WHEN octet_length(%(channel_prefix)s || queue) <= 63
                          THEN %(channel_prefix)s || queue
                          ELSE 'potatoq:' || md5(%(channel_prefix)s || queue) END, '')
    FROM queues WHERE %(notify)s
)
SELECT coalesce(sum(n), 0)::bigint AS promoted, (SELECT count(*) FROM notified) AS notified,
       -- seconds until the earliest task still scheduled falls due (NULL: none), so that an
       -- idle worker sleeps until then instead of until its next timed promotion. Relative to
       -- the server's clock, which set run_at; one more short scan of the state = 0 index.
       (SELECT extract(epoch FROM min(run_at) - clock_timestamp())::float8
        FROM {schema}.potatoq_jobs WHERE state = 0 AND run_at > now()) AS next_due
FROM queues;

-- name: job_claim
-- Take the best ready task of the first queue (in the order given) that has one. The lateral
-- subquery is a short scan of the ready index per queue; the outer LIMIT stops the nested
-- loop at the first queue that yields a row, so exactly one row is locked. MATERIALIZED
-- keeps the locking sub-select from being inlined and re-run by the planner, which could
-- claim more rows than LIMIT. The new token fences this delivery.
-- no_flush (an idle worker's claim, alone in its transaction): commit without waiting for
-- the WAL flush, which is on the path from enqueue to start. A server crash can undo such
-- a claim only if it comes within a fraction of a second (wal_writer_delay); the task is
-- then ready again and runs once more, as after any lost delivery. A claim pipelined with
-- a settle (no_flush false) leaves that transaction's durability alone.
-- A worker of one queue (the usual case) passes it as the scalar queue, queues NULL: an
-- array parameter costs psycopg about 25 us to adapt, on the path from enqueue to start.
-- Concurrency limits (limits.sql): a task whose key has every slot taken is skipped, so it
-- holds back neither unlimited tasks nor other keys; "slot" takes the slot with an upsert
-- whose row lock serializes the claims of one key and re-checks the count, and the task is
-- claimed only if it got one.
-- Rate limits (rates.sql): a task whose key has no token now is skipped (rate_defer, run
-- before this, moved most of them out of the ready index); "token" takes the token with an
-- upsert whose row lock serializes the claims of one key and re-checks the time, and the
-- task is claimed only if it got one. A slot is taken only after the token: a lost race
-- for the token leaves no slot behind.
WITH picked AS MATERIALIZED (
    SELECT j.id, j.limit_key, j.limit_max, j.rate_key, j.rate_interval, j.rate_burst
    FROM unnest(coalesce(%(queues)s::text[], ARRAY[%(queue)s::text])) WITH ORDINALITY AS q(name, ord)
    CROSS JOIN LATERAL (
        SELECT r.id, r.limit_key, r.limit_max, r.rate_key, r.rate_interval, r.rate_burst
        FROM {schema}.potatoq_jobs AS r
        WHERE r.state = 1 AND r.parked IS NULL AND r.queue = q.name
          AND (r.limit_key IS NULL OR NOT EXISTS (
                SELECT FROM {schema}.potatoq_limits AS l
                WHERE l.key = r.limit_key AND l.running >= coalesce(l.concurrency, r.limit_max)))
          AND (r.rate_key IS NULL OR NOT EXISTS (
                SELECT FROM {schema}.potatoq_rates AS t
                WHERE t.key = r.rate_key AND t.next_at > extract(epoch FROM now())))
        ORDER BY r.priority DESC, r.seq
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) AS j
    LIMIT 1
), parking AS (
    -- Ready tasks of these queues whose key is full leave the ready index (a trigger puts
    -- one back per freed slot). Only rows of full keys are visited; locked ones are left
    -- for a later claim.
    -- park is false until this process has claimed a limited task: parking only saves
    -- work (picked skips those rows anyway), and unlimited workloads skip it.
    UPDATE {schema}.potatoq_jobs AS p SET parked = true
    WHERE %(park)s::boolean AND p.id IN (
        SELECT b.id FROM {schema}.potatoq_jobs AS b
        JOIN {schema}.potatoq_limits AS l ON l.key = b.limit_key AND l.running >= coalesce(l.concurrency, l.carried)
        WHERE b.state = 1 AND b.parked IS NULL AND b.limit_key IS NOT NULL
          AND b.queue = ANY(coalesce(%(queues)s::text[], ARRAY[%(queue)s::text]))
        FOR UPDATE OF b SKIP LOCKED)
), token AS (
    INSERT INTO {schema}.potatoq_rates AS t (key, tat, next_at, token_secs, burst)
    SELECT p.rate_key, n.now + p.rate_interval, n.now + p.rate_interval - (p.rate_burst - 1) * p.rate_interval,
           p.rate_interval, p.rate_burst
    FROM picked AS p CROSS JOIN (SELECT extract(epoch FROM now())::float8 AS now) AS n
    WHERE p.rate_key IS NOT NULL
    ON CONFLICT (key) DO UPDATE SET
        tat = greatest(t.tat, extract(epoch FROM now())) + coalesce(1 / t.override_rate, excluded.token_secs),
        next_at = greatest(t.tat, extract(epoch FROM now())) + coalesce(1 / t.override_rate, excluded.token_secs)
                  - (coalesce(t.override_burst, excluded.burst) - 1) * coalesce(1 / t.override_rate, excluded.token_secs),
        token_secs = excluded.token_secs, burst = excluded.burst
    WHERE t.next_at <= extract(epoch FROM now())
    RETURNING t.key
), slot AS (
    INSERT INTO {schema}.potatoq_limits AS l (key, running, carried)
    SELECT p.limit_key, 1, p.limit_max FROM picked AS p
    WHERE p.limit_key IS NOT NULL AND (p.rate_key IS NULL OR EXISTS (SELECT FROM token))
    ON CONFLICT (key) DO UPDATE SET running = l.running + 1, carried = excluded.carried
    WHERE l.running < coalesce(l.concurrency, excluded.carried)
    RETURNING l.key
), claimed AS (
    UPDATE {schema}.potatoq_jobs AS j
    SET state = 2, deliveries = j.deliveries + 1, token = gen_random_uuid(),
        worker = %(worker)s, pid = %(pid)s, claimed_at = now(), rate_wait = NULL
    FROM picked
    WHERE j.id = picked.id
      AND (picked.limit_key IS NULL OR EXISTS (SELECT FROM slot))
      AND (picked.rate_key IS NULL OR EXISTS (SELECT FROM token))
      AND (NOT %(no_flush)s OR set_config('synchronous_commit', 'off', true) = 'off')
    RETURNING j.id, j.queue, j.deliveries, j.token::text AS token, j.payload,
              extract(epoch FROM j.claimed_at)::float8 AS claimed_at
)
SELECT * FROM claimed
UNION ALL
-- Another claim took the key's last token first: a row of NULLs asks the caller to claim
-- again (the key is without a token now, so that claim moves its tasks aside).
SELECT NULL, NULL, NULL, NULL, NULL, NULL FROM picked
WHERE picked.rate_key IS NOT NULL AND NOT EXISTS (SELECT FROM token);

-- name: job_finish
-- Complete or dead-letter a claimed task in one statement, hence one transaction. The
-- delete is fenced on the delivery's token; everything else reads from "settled", so a
-- stale delivery changes nothing at all. In order: the dead letter (when reason is set;
-- the dead letters are trimmed to dead_max), the result, the chord join (whose last part
-- enqueues the callback), the follow-up messages, and the NOTIFYs, which PostgreSQL
-- delivers at commit.
WITH settled AS (
    DELETE FROM {schema}.potatoq_jobs
    WHERE id = %(id)s AND token = %(token)s::uuid AND state = 2
    RETURNING id, queue, priority, deliveries, payload
), dead AS (
    INSERT INTO {schema}.potatoq_dead AS d (id, queue, task, priority, reason, payload, deliveries)
    SELECT s.id, s.queue, %(task)s::text, s.priority, %(reason)s::text, s.payload, s.deliveries
    FROM settled AS s
    WHERE %(reason)s::text IS NOT NULL
), trimmed AS (
    -- dead_letter_max (at least 1): keep the newest max - 1 earlier letters beside this
    -- one, which the statement's snapshot doesn't show. An earlier death of the same id is
    -- one of them: both are kept.
    DELETE FROM {schema}.potatoq_dead
    WHERE seq IN (SELECT o.seq FROM {schema}.potatoq_dead AS o
                  WHERE %(reason)s::text IS NOT NULL
                    AND EXISTS (SELECT FROM settled)
                  ORDER BY o.died_at DESC, o.seq DESC
                  OFFSET greatest(%(dead_max)s::integer - 1, 0))
), stored AS (
    INSERT INTO {schema}.potatoq_results AS r (task_id, state, record, expires_at)
    SELECT s.id, %(result_state)s::text, %(result)s::bytea,
           now() + make_interval(secs => %(result_expires)s::float8)
    FROM settled AS s
    WHERE %(result)s::bytea IS NOT NULL
    ON CONFLICT (task_id) DO UPDATE
    SET state = excluded.state, record = excluded.record, expires_at = excluded.expires_at
), part AS (
    INSERT INTO {schema}.potatoq_chord_parts (group_id, idx, value)
    SELECT %(chord_id)s::text, %(chord_index)s::integer, %(chord_value)s::bytea
    FROM settled
    WHERE %(chord_id)s::text IS NOT NULL
    ON CONFLICT (group_id, idx) DO NOTHING
    RETURNING group_id
), joined AS (
    INSERT INTO {schema}.potatoq_chords AS c (group_id, size, joined, expires_at)
    SELECT group_id, %(chord_size)s::integer, 1,
           now() + make_interval(secs => %(result_expires)s::float8)
    FROM part
    ON CONFLICT (group_id) DO UPDATE
    SET joined = c.joined + 1, expires_at = excluded.expires_at
    RETURNING c.joined = c.size AS complete
), new_jobs AS (
    SELECT 0 AS src, m.* FROM unnest(%(m_ids)s::text[], %(m_queues)s::text[],
                                     %(m_priorities)s::integer[], %(m_etas)s::float8[],
                                     %(m_payloads)s::bytea[])
        WITH ORDINALITY AS m(id, queue, priority, eta, payload, ord)
    WHERE EXISTS (SELECT FROM settled)
    UNION ALL
    SELECT 1 AS src, cb.* FROM unnest(%(cb_ids)s::text[], %(cb_queues)s::text[],
                                      %(cb_priorities)s::integer[], %(cb_etas)s::float8[],
                                      %(cb_payloads)s::bytea[])
        WITH ORDINALITY AS cb(id, queue, priority, eta, payload, ord)
    WHERE EXISTS (SELECT FROM joined WHERE complete)
), inserted AS (
    INSERT INTO {schema}.potatoq_jobs (id, queue, priority, state, run_at, payload)
    SELECT n.id, n.queue, n.priority,
           CASE WHEN to_timestamp(n.eta) > now() THEN 0 ELSE 1 END,
           coalesce(to_timestamp(n.eta), now()),
           n.payload
    FROM new_jobs AS n
    ORDER BY n.src, n.ord
    ON CONFLICT DO NOTHING
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM settled)
), notified_callback AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(cb_channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM joined WHERE complete)
)
SELECT (SELECT count(*) FROM settled) AS settled,
       EXISTS (SELECT FROM joined WHERE complete) AS chord_complete,
       (SELECT count(*) FROM notified) + (SELECT count(*) FROM notified_callback) AS notified;

-- name: job_retry
-- Put a claimed task back as a new attempt (same id, new payload), due at eta, fenced on
-- the token, with its RETRY result in the same statement. The delivery count restarts: it
-- counts crashes of one attempt. A new seq queues it behind tasks already waiting.
WITH retried AS (
    UPDATE {schema}.potatoq_jobs
    SET state = CASE WHEN to_timestamp(%(eta)s::float8) > now() THEN 0 ELSE 1 END,
        run_at = coalesce(to_timestamp(%(eta)s::float8), now()),
        seq = DEFAULT, queue = %(queue)s::text, priority = %(priority)s::integer,
        payload = %(payload)s::bytea,
        deliveries = 0, token = NULL, worker = NULL, pid = NULL, claimed_at = NULL
    WHERE id = %(id)s AND token = %(token)s::uuid AND state = 2
    RETURNING id
), stored AS (
    INSERT INTO {schema}.potatoq_results AS r (task_id, state, record, expires_at)
    SELECT t.id, %(result_state)s::text, %(result)s::bytea,
           now() + make_interval(secs => %(result_expires)s::float8)
    FROM retried AS t
    WHERE %(result)s::bytea IS NOT NULL
    ON CONFLICT (task_id) DO UPDATE
    SET state = excluded.state, record = excluded.record, expires_at = excluded.expires_at
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM retried)
)
SELECT (SELECT count(*) FROM retried) AS settled, (SELECT count(*) FROM notified) AS notified;

-- name: job_requeue
-- Make a claimed task ready again, fenced on the token. It keeps its seq, so it goes back to
-- the front of its priority. uncount is 1 for a graceful shutdown (that delivery doesn't
-- count towards task_max_deliveries) and 0 for a crash.
WITH requeued AS (
    UPDATE {schema}.potatoq_jobs
    SET state = 1, deliveries = greatest(deliveries - %(uncount)s::integer, 0),
        token = NULL, worker = NULL, pid = NULL, claimed_at = NULL
    WHERE id = %(id)s AND token = %(token)s::uuid AND state = 2
    RETURNING id
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM requeued)
)
SELECT (SELECT count(*) FROM requeued) AS settled, (SELECT count(*) FROM notified) AS notified;

-- name: job_recover
-- Requeue the running tasks whose holder is dead: its node's last heartbeat (or, with no
-- heartbeat row, the claim itself) is older than dead_after seconds. Tasks already at
-- max_deliveries are left for job_lost (they are dead-lettered instead). Walks the
-- state = 2 index only. SKIP LOCKED makes concurrent recoverers split the work.
-- The heartbeat row of a node silent that long goes once it holds no running task: every
-- worker run is a new node id, so dead ones would pile up. The statement's snapshot still
-- shows the tasks requeued here as running, so a node's row goes in the next call after
-- its tasks were recovered (recovery reads that row's last_seen until then).
WITH forgotten AS (
    DELETE FROM {schema}.potatoq_workers AS w
    WHERE w.last_seen < now() - make_interval(secs => %(dead_after)s::float8)
      AND NOT EXISTS (SELECT FROM {schema}.potatoq_jobs AS j WHERE j.state = 2 AND j.worker = w.node)
), lost AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.potatoq_jobs AS j
    LEFT JOIN {schema}.potatoq_workers AS w ON w.node = j.worker
    WHERE j.state = 2
      AND coalesce(w.last_seen, j.claimed_at) < now() - make_interval(secs => %(dead_after)s::float8)
      AND j.deliveries < %(max_deliveries)s
    FOR UPDATE OF j SKIP LOCKED
), requeued AS (
    UPDATE {schema}.potatoq_jobs AS j
    SET state = 1, token = NULL, worker = NULL, pid = NULL, claimed_at = NULL
    WHERE j.id = ANY (ARRAY(SELECT id FROM lost))  -- primary-key probes, as in job_promote
    RETURNING j.queue
), queues AS MATERIALIZED (
    SELECT queue, count(*) AS n FROM requeued GROUP BY queue
), notified AS MATERIALIZED (
    SELECT pg_notify(CASE WHEN octet_length(%(channel_prefix)s || queue) <= 63
                          THEN %(channel_prefix)s || queue
                          ELSE 'potatoq:' || md5(%(channel_prefix)s || queue) END, '')
    FROM queues WHERE %(notify)s
)
SELECT coalesce(sum(n), 0)::bigint AS requeued, (SELECT count(*) FROM notified) AS notified
FROM queues;

-- name: job_lost
-- Running tasks of dead holders that have used up their deliveries. The caller dead-letters
-- each one with job_finish, fenced on the token read here, so concurrent recoverers can't
-- both do it.
SELECT j.id, j.queue, j.token::text AS token, j.deliveries, j.payload, j.worker, j.pid
FROM {schema}.potatoq_jobs AS j
LEFT JOIN {schema}.potatoq_workers AS w ON w.node = j.worker
WHERE j.state = 2
  AND coalesce(w.last_seen, j.claimed_at) < now() - make_interval(secs => %(dead_after)s::float8)
  AND j.deliveries >= %(max_deliveries)s
ORDER BY j.claimed_at
LIMIT 1000;

-- name: job_held_by
-- The claims of one holder (a worker child), read by its supervisor after the child died:
-- a claim the child didn't live to report. Uses the partial index on (worker, pid).
SELECT id, queue, deliveries, token::text AS token, payload,
       extract(epoch FROM claimed_at)::float8 AS claimed_at
FROM {schema}.potatoq_jobs
WHERE state = 2 AND worker = %(worker)s AND pid = %(pid)s
ORDER BY claimed_at;

-- name: job_orphaned
-- The claims recorded under this node by a pid that is none of its live processes: a claim
-- whose statement the server committed after the child that sent it was killed and reaped.
-- Read by the supervisor every recovery round; uses the partial index on (worker, pid).
SELECT id, queue, deliveries, token::text AS token, payload,
       extract(epoch FROM claimed_at)::float8 AS claimed_at, pid
FROM {schema}.potatoq_jobs
WHERE state = 2 AND worker = %(worker)s AND pid <> ALL (%(live)s::int[])
ORDER BY claimed_at;

-- name: job_revoke
-- Remove a waiting (ready or scheduled) task. A running one stays: its worker finishes it.
DELETE FROM {schema}.potatoq_jobs WHERE id = %(id)s AND state <> 2
RETURNING 1;

-- name: jobs_purge
-- At most %(batch)s waiting tasks of :queues per call (the caller loops, one transaction per
-- batch, so locks and WAL stay small and workers go on between batches). The seqs come from
-- the ready, parked and scheduled-by-queue indexes, then each row is deleted by primary key
-- probe (id): other queues' rows are never read.
DELETE FROM {schema}.potatoq_jobs
WHERE id IN (SELECT id FROM (
                 SELECT id FROM {schema}.potatoq_jobs
                 WHERE state = 1 AND parked IS NULL AND queue = ANY (%(queues)s::text[])
                 UNION ALL
                 SELECT id FROM {schema}.potatoq_jobs  -- behind a full limit
                 WHERE state = 1 AND parked AND queue = ANY (%(queues)s::text[])
                 UNION ALL
                 SELECT id FROM {schema}.potatoq_jobs
                 WHERE state = 0 AND queue = ANY (%(queues)s::text[])) AS w
             LIMIT %(batch)s);

-- name: unique_holders
-- After job_enqueue: the tasks holding :keys (unique messages it didn't insert), and which
-- of :ids (those messages' own ids) are stored already (key NULL).
SELECT j.unique_key, j.id FROM {schema}.potatoq_jobs AS j WHERE j.unique_key = ANY (%(keys)s::text[])
UNION ALL
SELECT NULL, j.id FROM {schema}.potatoq_jobs AS j WHERE j.id = ANY (%(ids)s::text[]);
