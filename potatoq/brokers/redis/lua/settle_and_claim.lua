-- settle_and_claim: settle one delivery and claim the worker's next task, so a busy
-- worker pays one round trip per task. The loader builds one script per outcome kind
-- (settle_and_claim.complete, ...: settle_KIND and @KIND@ become that kind), so each one
-- carries only the helpers its kind needs.
-- KEYS: none (see the settle scripts and claim.lua)
-- ARGV: [1] prefix, [2] outcome kind: 'complete' | 'retry' | 'requeue' | 'dead' (the
--       script's own kind), [3..k] that outcome's arguments (ARGV[2..] of
--       complete/retry/requeue/dead_letter.lua), [k+1..] claim arguments (ARGV[2..] of claim.lua)
-- Returns: {settled, id, queue, payload, deliveries, token, claimed_ms}, or {settled}
--          when there was nothing to claim.
if ARGV[2] ~= '@KIND@' then
  return redis.error_reply('settle_and_claim.@KIND@ called for outcome kind ' .. tostring(ARGV[2]))
end
local now = now_ms()
local settled, pos = settle_KIND(3, now)
local claimed = claim_from_argv(pos, now)
if not claimed then return {settled} end
table.insert(claimed, 1, settled)
return claimed
