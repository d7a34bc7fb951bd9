-- Task history: one row per finished delivery (see potatoq.brokers.history).

-- name: history_insert
-- One row per element of the parallel arrays (a settle writes one, append_history many).
INSERT INTO {schema}.potatoq_history (
    task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime, worker,
    pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview, parent_id,
    root_id, group_id
)
SELECT * FROM unnest(
    %(task_id)s::text[], %(name)s::text[], %(queue)s::text[], %(state)s::text[],
    %(finished_at)s::float8[], %(started_at)s::float8[], %(enqueued_at)s::float8[],
    %(due_at)s::float8[], %(runtime)s::float8[], %(worker)s::text[], %(pid)s::int[],
    %(deliveries)s::int[], %(retries)s::int[], %(exc_type)s::text[], %(exc_message)s::text[],
    %(args_preview)s::text[], %(result_preview)s::text[], %(parent_id)s::text[],
    %(root_id)s::text[], %(group_id)s::text[]
);

-- name: history_page
-- Keyset pagination on seq (newest first); %(limit)s is one more than the page size, to
-- tell whether a next page exists. A NULL filter matches everything.
SELECT seq, task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime,
       worker, pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview,
       parent_id, root_id, group_id
FROM {schema}.potatoq_history
WHERE seq < %(cursor)s
  AND (%(name)s::text IS NULL OR name = %(name)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task_id)s::text IS NULL OR task_id = %(task_id)s)
  AND (%(since)s::float8 IS NULL OR finished_at >= %(since)s)
  AND (%(until)s::float8 IS NULL OR finished_at < %(until)s)
  AND (%(text)s::text IS NULL
       OR strpos(lower(coalesce(exc_type, '') || ' ' || coalesce(exc_message, '')), %(text)s) > 0)
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: history_trim
-- Retention: drop rows older than the cutoff, then those more than %(keep)s seqs below the
-- newest: two index probes and the surplus rows, however large the table (an OFFSET walked
-- %(keep)s index entries each time). seq gaps (rolled back inserts) only keep fewer rows.
WITH aged AS (
    DELETE FROM {schema}.potatoq_history WHERE finished_at < %(cutoff)s
)
DELETE FROM {schema}.potatoq_history
WHERE seq <= (SELECT max(seq) FROM {schema}.potatoq_history) - %(keep)s;

-- name: history_job_revoke
-- job_revoke returning what the REVOKED record needs (the task name is in the payload).
DELETE FROM {schema}.potatoq_jobs WHERE id = %(id)s AND state <> 2
RETURNING queue, payload;
