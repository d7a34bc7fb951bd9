-- Chords outside a settle (job_finish joins inside its own statement, the same way).

-- name: chord_join
-- Record one header part and count it once per index; the join that brings the count to
-- the chord's size enqueues the callback (when cb_* arrays are given) in the same
-- statement. The counter upsert takes the row lock, so concurrent joins are serialized
-- and exactly one of them sees joined = size.
WITH part AS (
    INSERT INTO {schema}.potatoq_chord_parts (group_id, idx, value)
    VALUES (%(chord_id)s, %(chord_index)s, %(chord_value)s)
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
), inserted AS (
    INSERT INTO {schema}.potatoq_jobs (id, queue, priority, state, run_at, payload)
    SELECT cb.id, cb.queue, cb.priority,
           CASE WHEN to_timestamp(cb.eta) > now() THEN 0 ELSE 1 END,
           coalesce(to_timestamp(cb.eta), now()),
           cb.payload
    FROM unnest(%(cb_ids)s::text[], %(cb_queues)s::text[], %(cb_priorities)s::integer[],
                %(cb_etas)s::float8[], %(cb_payloads)s::bytea[])
         AS cb(id, queue, priority, eta, payload)
    WHERE EXISTS (SELECT FROM joined WHERE complete)
    ON CONFLICT DO NOTHING
), notified AS MATERIALIZED (
    SELECT pg_notify(channel, '') FROM unnest(%(cb_channels)s::text[]) AS channel
    WHERE EXISTS (SELECT FROM joined WHERE complete)
)
SELECT EXISTS (SELECT FROM joined WHERE complete) AS chord_complete,
       (SELECT count(*) FROM notified) AS notified;

-- name: chord_parts
SELECT p.value
FROM {schema}.potatoq_chord_parts AS p
JOIN {schema}.potatoq_chords AS c ON c.group_id = p.group_id
WHERE p.group_id = %(chord_id)s AND c.expires_at > now()
ORDER BY p.idx;
