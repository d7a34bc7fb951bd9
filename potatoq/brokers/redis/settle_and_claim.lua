-- settle_and_claim: settle one delivery and claim the worker's next task, so a busy
-- worker pays one round trip per task.
-- KEYS: none (see the settle scripts and claim.lua)
-- ARGV: [1] prefix, [2] outcome kind: 'complete' | 'retry' | 'requeue' | 'dead',
--       [3..k] that outcome's arguments (ARGV[2..] of complete/retry/requeue/dead_letter.lua),
--       [k+1..] claim arguments (ARGV[2..] of claim.lua)
-- Returns: {settled, id, queue, payload, deliveries, token, claimed_ms}, or {settled}
--          when there was nothing to claim.
local now = now_ms()
local settle = SETTLE[ARGV[2]]
if not settle then return redis.error_reply('unknown outcome kind ' .. tostring(ARGV[2])) end
local settled, pos = settle(3, now)
local claimed = claim_from_argv(pos, now)
if not claimed then return {settled} end
return {settled, claimed[1], claimed[2], claimed[3], claimed[4], claimed[5], claimed[6]}
