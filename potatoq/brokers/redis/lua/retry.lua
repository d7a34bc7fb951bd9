-- retry: replace a running task by its next attempt (same id, new payload), due at its
-- eta; its delivery count starts again from zero. Writes the RETRY result if given.
-- KEYS: none (job:<id>, q:<queue>:active/ready/delayed/marker, result:<id>)
-- ARGV: [1] prefix, [2] id, [3] token, [4] result ('' = none), [5] result ttl ms,
--       [6] queue, [7] priority, [8] due ms ('' = now), [9] payload
-- Returns: 1 settled, 0 stale delivery.
local settled = settle_retry(2, now_ms())
return settled
