-- Global rate limits (potatoq/brokers/limits.py): GCRA per key in potatoq_rates, times in
-- epoch seconds of the server's clock (now(), as run_at). The claim (jobs.sql, job_claim)
-- takes a token; rate_defer runs before it in the same round trip.

-- name: rate_defer
-- Ready tasks of these queues whose key has no token now become scheduled tasks at the
-- times their tokens are expected, one token apart in line order, after those moved before
-- (defer_at): they leave the ready index, no delivery is counted, and the usual promotion
-- makes them ready when due. Only keys without a token are visited (potatoq_rates_next).
-- Returns, per queue, the seconds until its first moved task is due (for the wake-ups).
WITH blocked AS MATERIALIZED (
    SELECT b.id, b.rate_key, b.priority, b.seq, b.rate_interval, b.queue, b.rate_wait
    FROM {schema}.potatoq_rates AS r
    JOIN {schema}.potatoq_jobs AS b ON b.rate_key = r.key AND b.state = 1
    WHERE r.next_at > extract(epoch FROM now()) AND b.parked IS NULL
      AND b.queue = ANY (coalesce(%(queues)s::text[], ARRAY[%(queue)s::text]))
    FOR UPDATE OF b SKIP LOCKED
), placed AS MATERIALIZED (
    SELECT b.id, b.rate_key, b.queue, coalesce(1 / r.override_rate, b.rate_interval) AS step,
           -- one that waited already and came back a little before its token (the claim
           -- before it was late) takes the next token, not the back of the line
           CASE WHEN b.rate_wait THEN r.next_at
                ELSE greatest(r.next_at, r.defer_at)
                     + (row_number() OVER (PARTITION BY b.rate_key, b.rate_wait
                                           ORDER BY b.priority DESC, b.seq) - 1)
                       * coalesce(1 / r.override_rate, b.rate_interval) END AS at
    FROM blocked AS b JOIN {schema}.potatoq_rates AS r ON r.key = b.rate_key
), moved AS (
    UPDATE {schema}.potatoq_jobs AS j SET state = 0, rate_wait = true, run_at = to_timestamp(p.at)
    FROM placed AS p WHERE j.id = p.id
), marked AS (
    UPDATE {schema}.potatoq_rates AS r SET defer_at = greatest(r.defer_at, m.last)
    FROM (SELECT rate_key, max(at + step) AS last FROM placed GROUP BY rate_key) AS m
    WHERE r.key = m.rate_key
)
SELECT queue, min(at) - extract(epoch FROM clock_timestamp())::float8 FROM placed GROUP BY queue;

-- name: rate_set
-- A rate changed at run time (NULL rate clears the override): the key starts again with a
-- full burst, and its tasks waiting for a token are due now, to be spread at the new rate.
WITH set AS (
    INSERT INTO {schema}.potatoq_rates AS r (key, override_rate, override_burst)
    VALUES (%(key)s, %(rate)s, %(burst)s)
    ON CONFLICT (key) DO UPDATE SET
        override_rate = excluded.override_rate, override_burst = excluded.override_burst,
        tat = 0, next_at = 0, defer_at = 0
    RETURNING r.key
)
UPDATE {schema}.potatoq_jobs SET run_at = now(), rate_wait = NULL
WHERE rate_key = (SELECT key FROM set) AND state = 0 AND rate_wait;

-- name: rate_forget_idle
-- Housekeeping: a key whose bucket is full again and has no override is as good as absent.
DELETE FROM {schema}.potatoq_rates
WHERE tat < extract(epoch FROM now()) AND defer_at < extract(epoch FROM now()) AND override_rate IS NULL;

-- name: rate_usage
-- Every key with waiting tasks, tokens in use or an override:
-- (key, per second, burst, tat, waiting, overridden), and the server's clock.
WITH waiting AS MATERIALIZED (
    SELECT rate_key AS key, count(*) AS n, max(rate_interval) AS token_secs, max(rate_burst) AS burst
    FROM {schema}.potatoq_jobs WHERE rate_key IS NOT NULL AND state IN (0, 1) GROUP BY rate_key
), keys AS (
    SELECT key FROM waiting
    UNION SELECT key FROM {schema}.potatoq_rates
    WHERE override_rate IS NOT NULL OR tat > extract(epoch FROM now())
)
SELECT k.key, coalesce(r.override_rate, 1 / r.token_secs, 1 / w.token_secs),
       coalesce(r.override_burst, r.burst, w.burst), r.tat, coalesce(w.n, 0),
       r.override_rate IS NOT NULL, extract(epoch FROM clock_timestamp())::float8
FROM keys AS k
LEFT JOIN {schema}.potatoq_rates AS r ON r.key = k.key
LEFT JOIN waiting AS w ON w.key = k.key
ORDER BY k.key;
