-- Read-only look-ups for the dashboard and `potatoq schedule`: nothing here writes.
-- {schema} is the quoted schema name.

-- name: job_find
-- One task still held (scheduled, ready or running), by its primary key.
SELECT id, queue, state, priority, extract(epoch FROM run_at)::float8 AS due, deliveries, payload
FROM {schema}.potatoq_jobs WHERE id = %(id)s;

-- name: periodic_last
-- The newest recorded fire time of each named entry; max() over the (name, fire_time)
-- primary key is one backward index seek per name.
SELECT name, max(fire_time) AS fire_time FROM {schema}.potatoq_periodic
WHERE name = ANY(%(names)s::text[])
GROUP BY name;
