-- Periodic tasks: every worker runs the scheduler; the primary key picks one winner per
-- fire time.

-- name: periodic_claim
-- Record (name, fire_time) and, if this call recorded it, enqueue the run (m_* arrays of
-- length 0 or 1) in the same statement.
WITH claimed AS (
    INSERT INTO {schema}.potatoq_periodic (name, fire_time)
    VALUES (%(name)s, %(fire_time)s::float8)
    ON CONFLICT (name, fire_time) DO NOTHING
    RETURNING name
), inserted AS (
    INSERT INTO {schema}.potatoq_jobs (id, queue, priority, state, run_at, payload)
    SELECT m.id, m.queue, m.priority,
           CASE WHEN to_timestamp(m.eta) > now() THEN 0 ELSE 1 END,
           coalesce(to_timestamp(m.eta), now()),
           m.payload
    FROM unnest(%(m_ids)s::text[], %(m_queues)s::text[], %(m_priorities)s::integer[],
                %(m_etas)s::float8[], %(m_payloads)s::bytea[])
         AS m(id, queue, priority, eta, payload)
    WHERE EXISTS (SELECT FROM claimed)
    ON CONFLICT DO NOTHING
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM claimed)
)
SELECT (SELECT count(*) FROM claimed) AS claimed, (SELECT count(*) FROM notified) AS notified;
