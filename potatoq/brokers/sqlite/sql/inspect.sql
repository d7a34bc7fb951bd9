-- Read-only look-ups for the dashboard and `potatoq schedule`: nothing here writes.

-- name: job_find
-- One task still held (scheduled, ready or running), by its unique id.
SELECT id, queue, state, priority, run_at, deliveries, payload FROM potatoq_jobs WHERE id = :id;

-- name: periodic_last
-- The newest recorded fire time of each entry named in the JSON array :names; max() over
-- the (name, fire_time) primary key is one index seek per name.
SELECT name, max(fire_time) FROM potatoq_periodic
WHERE name IN (SELECT value FROM json_each(:names))
GROUP BY name;
