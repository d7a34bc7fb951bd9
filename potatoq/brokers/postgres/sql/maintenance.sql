-- Housekeeping, run by recover() at most once a minute per process: each delete walks an
-- expiry index and is bounded, so a large backlog is worked off over several sweeps.

-- name: maintenance_sweep
WITH results AS (
    DELETE FROM {schema}.potatoq_results
    -- = ANY (ARRAY(...)): primary-key probes, never a join that reads the whole table.
    -- The expiry is checked again in case the result was stored anew meanwhile, written as
    -- an expression the expiry index can't serve: as a plain "expires_at < now()" the
    -- planner may walk the expiry index and test each row against the whole array.
    WHERE task_id = ANY (ARRAY(SELECT task_id FROM {schema}.potatoq_results
                               WHERE expires_at < now() ORDER BY expires_at LIMIT %(batch)s))
      AND extract(epoch FROM expires_at) < extract(epoch FROM now())
    RETURNING 1
), chords AS (
    DELETE FROM {schema}.potatoq_chords
    WHERE group_id IN (SELECT group_id FROM {schema}.potatoq_chords
                       WHERE expires_at < now() ORDER BY expires_at LIMIT %(batch)s)
    RETURNING group_id
), parts AS (
    DELETE FROM {schema}.potatoq_chord_parts AS p USING chords AS c
    WHERE p.group_id = c.group_id
    RETURNING 1
), periodic AS (
    DELETE FROM {schema}.potatoq_periodic
    WHERE (name, fire_time) IN (
        SELECT o.name, o.fire_time FROM {schema}.potatoq_periodic o
        WHERE o.claimed_at < now() - make_interval(secs => %(periodic_keep)s::float8)
          -- each entry's newest fire time stays: it is the "last run" that
          -- last_fire_times() reports, however rarely the entry fires
          AND o.fire_time < (SELECT max(q.fire_time) FROM {schema}.potatoq_periodic q
                           WHERE q.name = o.name)
        ORDER BY o.claimed_at LIMIT %(batch)s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM results) AS results, (SELECT count(*) FROM chords) AS chords,
       (SELECT count(*) FROM parts) AS parts, (SELECT count(*) FROM periodic) AS periodic;
