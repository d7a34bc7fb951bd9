-- Task rows: enqueue, claim, settle, recover. States: 0 scheduled, 1 ready, 2 running.
-- State literals are written in the SQL (not bound) so the planner matches the partial indexes.

-- name: job_insert
-- A second task with a unique key already held isn't stored either (unique.sql).
INSERT INTO potatoq_jobs (id, queue, task, priority, state, run_at, payload, limit_key, limit_max,
                          unique_key, unique_until, unique_running, rate_key, rate_interval, rate_burst)
VALUES (:id, :queue, :task, :priority, :state, :run_at, :payload, :limit_key, :limit_max,
        :unique_key, :unique_until, :unique_running, :rate_key, :rate_interval, :rate_burst)
ON CONFLICT DO NOTHING;

-- name: job_peek
-- The cheap read before the write lock: is anything ready, or scheduled and due, in :queues?
-- CROSS JOIN makes SQLite loop over the queue names and probe the index for each: with
-- statistics of one huge queue it would otherwise walk the whole ready index (or table).
-- Ready tasks held back by a concurrency limit don't count: they wait for a settle, whose
-- commit wakes wait() up (limits.sql, job_claimable says the same).
SELECT
    EXISTS (SELECT 1 FROM json_each(:queues) AS q CROSS JOIN potatoq_jobs AS j
            WHERE j.queue = q.value AND j.state = 1 AND j.parked IS NULL
              AND (j.limit_key IS NULL
                   OR (SELECT count(*) FROM potatoq_jobs AS r WHERE r.state = 2 AND r.limit_key = j.limit_key)
                      < coalesce((SELECT l.concurrency FROM potatoq_limits AS l WHERE l.key = j.limit_key),
                                 j.limit_max))),
    EXISTS (SELECT 1 FROM json_each(:queues) AS q CROSS JOIN potatoq_jobs AS j
            WHERE j.queue = q.value AND j.state = 0 AND j.run_at <= :now);

-- name: job_due_any
-- Whether any scheduled task of :queue is due: one probe of the scheduled index, before
-- job_promote_due (an UPDATE with a materialized window, a good share of a claim's CPU in a
-- busy worker even with nothing to promote). Most claims find nothing due and skip it.
SELECT 1 FROM potatoq_jobs INDEXED BY potatoq_jobs_scheduled
WHERE queue = :queue AND state = 0 AND run_at <= :now LIMIT 1;

-- name: job_promote_due
-- Scheduled tasks of :queue whose time has come become ready, inside the claim's
-- transaction (one statement per queue). Each takes a new seq above every row's (in order
-- of due time): FIFO order is the order in which tasks become ready (the broker contract),
-- so a task that waited for its eta goes behind the tasks that were already ready. The
-- window function makes SQLite compute the new numbers before it moves any row.
-- One queue per statement: the scheduled index (queue, run_at) then yields the rows in
-- order and LIMIT stops the walk. Over a list of queues SQLite merged them with a sort of
-- every due row, and with statistics of one huge queue it scanned the table instead: 100 ms
-- per claim behind 100,000 due tasks (bench-scale).
UPDATE potatoq_jobs SET state = 1, seq = due.new_seq
FROM (SELECT seq AS old_seq,
             (SELECT max(seq) FROM potatoq_jobs) + row_number() OVER (ORDER BY run_at, seq) AS new_seq
      FROM potatoq_jobs INDEXED BY potatoq_jobs_scheduled
      WHERE queue = :queue AND state = 0 AND run_at <= :now
      -- at most :limit per claim: a backlog of due tasks (after downtime, a mass ETA) is
      -- promoted over the next claims, never in one long write transaction
      ORDER BY run_at, seq LIMIT :limit) AS due
WHERE potatoq_jobs.seq = due.old_seq;

-- name: job_claim
-- Atomic without SKIP LOCKED: SQLite has one writer, and this runs under BEGIN IMMEDIATE.
UPDATE potatoq_jobs
SET state = 2, deliveries = deliveries + 1, token = :token, worker = :node, pid = :pid,
    claimed_at = :now, rate_wait = NULL
-- Rate limits: rate_defer (rates.sql) moved the ready tasks of keys without a token first.
WHERE seq = (SELECT j.seq FROM potatoq_jobs AS j WHERE j.state = 1 AND j.parked IS NULL AND j.queue = :queue
             -- Concurrency limits: skip tasks whose key has every slot running (the slots
             -- are the running rows). job_park_full took most of them out of the ready
             -- index first; this catches the rest.
             AND (j.limit_key IS NULL
                  OR (SELECT count(*) FROM potatoq_jobs AS r WHERE r.state = 2 AND r.limit_key = j.limit_key)
                     < coalesce((SELECT l.concurrency FROM potatoq_limits AS l WHERE l.key = j.limit_key),
                                j.limit_max))
             ORDER BY j.priority DESC, j.seq LIMIT 1)
RETURNING id, queue, deliveries, payload, limit_key, rate_key, rate_interval, rate_burst;

-- name: job_delete_claimed
-- Settling removes the row only while the claim's token still matches (the fence).
DELETE FROM potatoq_jobs WHERE id = :id AND token = :token AND state = 2
RETURNING queue, task, priority, deliveries, payload;

-- name: job_retry_later
-- A new attempt takes a new seq: it queues behind the tasks already ready (see job_promote_due).
UPDATE potatoq_jobs
SET seq = (SELECT max(seq) + 1 FROM potatoq_jobs),
    state = :state, run_at = :run_at, queue = :queue, task = :task, priority = :priority,
    payload = :payload, deliveries = 0, token = NULL, worker = NULL, pid = NULL, claimed_at = NULL
WHERE id = :id AND token = :token AND state = 2;

-- name: job_requeue
-- :uncount is 1 for a graceful requeue, whose delivery doesn't count toward max deliveries.
UPDATE potatoq_jobs
SET state = 1, deliveries = max(deliveries - :uncount, 0), token = NULL, worker = NULL, pid = NULL,
    claimed_at = NULL
WHERE id = :id AND token = :token AND state = 2;

-- name: job_revoke
DELETE FROM potatoq_jobs WHERE id = :id AND state IN (0, 1);

-- name: job_purge
-- At most :limit waiting rows of :queues per call (the caller loops, one write transaction
-- per batch), through the ready, parked and scheduled indexes (all lead with queue): other
-- queues' rows are never read.
-- (CROSS JOIN: an index probe per queue name, as in job_peek).
DELETE FROM potatoq_jobs
WHERE seq IN (SELECT seq FROM (
              SELECT j.seq FROM json_each(:queues) AS q CROSS JOIN potatoq_jobs AS j
              WHERE j.queue = q.value AND j.state = 1 AND j.parked IS NULL
              UNION ALL
              SELECT j.seq FROM json_each(:queues) AS q CROSS JOIN potatoq_jobs AS j
              WHERE j.queue = q.value AND j.state = 1 AND j.parked = 1
              UNION ALL
              SELECT j.seq FROM json_each(:queues) AS q CROSS JOIN potatoq_jobs AS j
              WHERE j.queue = q.value AND j.state = 0)
              LIMIT :limit);

-- name: job_held_by
-- The claims of one holder (a worker child), read by its supervisor after the child died:
-- a claim the child didn't live to report. Uses the running index (worker, pid).
SELECT id, queue, token, deliveries, payload, claimed_at FROM potatoq_jobs
WHERE state = 2 AND worker = :node AND pid = :pid
ORDER BY claimed_at;

-- name: job_orphaned
-- The claims recorded under this node by a pid that is none of its live processes (see
-- Broker.orphaned). In-process SQLite can't commit a killed child's claim later, but a
-- claim made under a wrong pid is found the same way.
SELECT id, queue, token, deliveries, payload, claimed_at, pid FROM potatoq_jobs
WHERE state = 2 AND worker = :node AND pid NOT IN (SELECT value FROM json_each(:live))
ORDER BY claimed_at;

-- name: job_lost_exists
-- Cheap read before recover() takes the write lock. A holder is dead when its node's last
-- heartbeat, or with no heartbeat on record its claim, is older than :cutoff.
SELECT EXISTS (
    SELECT 1 FROM potatoq_jobs AS j LEFT JOIN potatoq_workers AS w ON w.node = j.worker
    WHERE j.state = 2 AND coalesce(w.last_seen, j.claimed_at) < :cutoff
);

-- name: job_requeue_lost
UPDATE potatoq_jobs
SET state = 1, token = NULL, worker = NULL, pid = NULL, claimed_at = NULL
WHERE state = 2 AND deliveries < :max_deliveries AND seq IN (
    SELECT j.seq FROM potatoq_jobs AS j LEFT JOIN potatoq_workers AS w ON w.node = j.worker
    WHERE j.state = 2 AND coalesce(w.last_seen, j.claimed_at) < :cutoff
);

-- name: job_lost_list
-- The lost deliveries job_delete_lost would take now, read first for a separate result
-- backend: their results are written before the transaction that dead-letters them.
SELECT j.id, j.task, j.deliveries
FROM potatoq_jobs AS j LEFT JOIN potatoq_workers AS w ON w.node = j.worker
WHERE j.state = 2 AND j.deliveries >= :max_deliveries AND coalesce(w.last_seen, j.claimed_at) < :cutoff;

-- name: job_delete_lost
-- Lost deliveries that used up task_max_deliveries: returned to be dead-lettered.
DELETE FROM potatoq_jobs
WHERE state = 2 AND deliveries >= :max_deliveries AND seq IN (
    SELECT j.seq FROM potatoq_jobs AS j LEFT JOIN potatoq_workers AS w ON w.node = j.worker
    WHERE j.state = 2 AND coalesce(w.last_seen, j.claimed_at) < :cutoff
)
RETURNING id, queue, task, priority, deliveries, payload;

-- name: job_next_due
-- When the earliest scheduled task of :queues becomes due (NULL if none): wait() sleeps no longer.
-- One LIMIT 1 index probe per queue, however many tasks are scheduled.
SELECT min((SELECT run_at FROM potatoq_jobs WHERE state = 0 AND queue = q.value
            ORDER BY run_at LIMIT 1))
FROM json_each(:queues) AS q;
