-- Global rate limits (potatoq/brokers/limits.py): GCRA per key in potatoq_rates. The claim
-- (broker.py, _claim_in) runs rate_defer before job_claim and rate_take after it, in its
-- write transaction: SQLite has one writer, so the check and the take are atomic.

-- name: rate_any_waiting
-- Whether any key is without a token now: if none is, rate_defer has nothing to move. One
-- probe of potatoq_rates_next, against rate_defer's UPDATE with a materialized window (about
-- 1 µs against 8 on an empty table, and its share of a claim's CPU was 15 % in a worker).
SELECT 1 FROM potatoq_rates WHERE next_at > :now LIMIT 1;

-- name: rate_defer
-- Ready tasks of :queues whose key has no token now become scheduled tasks at the times
-- their tokens are expected, one interval apart in line order, after those already moved
-- (defer_at): they leave the ready index, no delivery is counted, and wait() sleeps until
-- the first is due (job_next_due). Only keys without a token are visited (potatoq_rates_next).
-- A task that waited already and came back a little before its token (the claim before it
-- was late) takes the next token rather than going to the back of the line.
UPDATE potatoq_jobs SET state = 0, rate_wait = 1, run_at = w.at
FROM (SELECT j.seq AS s,
             CASE WHEN j.rate_wait = 1 THEN r.next_at
                  ELSE max(r.next_at, r.defer_at)
                       + (row_number() OVER (PARTITION BY j.rate_key, j.rate_wait
                                             ORDER BY j.priority DESC, j.seq) - 1)
                         * coalesce(1.0 / r.override_rate, j.rate_interval) END AS at
      -- CROSS JOIN: SQLite loops over the keys without a token (potatoq_rates_next) and
      -- probes each key's ready rows, never the other way round.
      FROM potatoq_rates AS r CROSS JOIN potatoq_jobs AS j
      WHERE r.next_at > :now AND j.rate_key = r.key AND j.state = 1 AND j.parked IS NULL
        AND j.queue IN (SELECT value FROM json_each(:queues))) AS w
WHERE potatoq_jobs.seq = w.s
RETURNING rate_key;

-- name: rate_defer_mark
-- After rate_defer: the next task of each of :keys to wait goes after the last one moved.
UPDATE potatoq_rates
SET defer_at = max(defer_at,
                   (SELECT max(j.run_at) FROM potatoq_jobs AS j
                    WHERE j.rate_key = potatoq_rates.key AND j.state = 0 AND j.rate_wait = 1)
                   + coalesce(1.0 / override_rate, token_secs, 0))
WHERE key IN (SELECT value FROM json_each(:keys));

-- name: rate_take
-- The claimed task takes its key's token (the claim only picks keys with one).
INSERT INTO potatoq_rates (key, tat, next_at, token_secs, burst)
VALUES (:key, :now + :interval, :now + :interval - (:burst - 1) * :interval, :interval, :burst)
ON CONFLICT (key) DO UPDATE SET
    tat = max(tat, :now) + coalesce(1.0 / override_rate, :interval),
    next_at = max(tat, :now) + coalesce(1.0 / override_rate, :interval)
              - (coalesce(override_burst, :burst) - 1) * coalesce(1.0 / override_rate, :interval),
    token_secs = :interval,
    burst = :burst;

-- name: rate_set
-- A rate changed at run time (NULL :rate clears the override): the key starts again with a
-- full burst.
INSERT INTO potatoq_rates (key, override_rate, override_burst) VALUES (:key, :rate, :burst)
ON CONFLICT (key) DO UPDATE SET
    override_rate = excluded.override_rate, override_burst = excluded.override_burst,
    tat = 0, next_at = 0, defer_at = 0;

-- name: rate_unwait
-- ... and its tasks waiting for a token are due now, to be spread again at the new rate.
UPDATE potatoq_jobs SET run_at = :now, rate_wait = NULL
WHERE rate_key = :key AND state = 0 AND rate_wait = 1;

-- name: rate_forget_idle
-- Housekeeping: a key whose bucket is full again and has no override is as good as absent.
DELETE FROM potatoq_rates WHERE tat < :now AND defer_at < :now AND override_rate IS NULL;

-- name: rate_usage
-- Every key with waiting tasks, tokens in use or an override:
-- (key, per second, burst, tat, waiting, overridden).
WITH keys AS (
    SELECT rate_key AS key FROM potatoq_jobs WHERE rate_key IS NOT NULL AND state IN (0, 1)
    UNION SELECT key FROM potatoq_rates WHERE override_rate IS NOT NULL OR tat > :now
)
SELECT k.key,
       coalesce(r.override_rate, 1.0 / r.token_secs,
                (SELECT 1.0 / j.rate_interval FROM potatoq_jobs AS j WHERE j.rate_key = k.key LIMIT 1)),
       coalesce(r.override_burst, r.burst,
                (SELECT j.rate_burst FROM potatoq_jobs AS j WHERE j.rate_key = k.key LIMIT 1)),
       r.tat,
       (SELECT count(*) FROM potatoq_jobs AS j WHERE j.rate_key = k.key AND j.state IN (0, 1)),
       r.override_rate IS NOT NULL
FROM keys AS k LEFT JOIN potatoq_rates AS r ON r.key = k.key
ORDER BY k.key;
