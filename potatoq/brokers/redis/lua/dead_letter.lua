-- dead_letter: move a running task's payload, unchanged, to the dead letters with a
-- reason; write its result, join its chord and enqueue follow-ups in the same step.
-- KEYS: none (job:<id>, q:<queue>:active, dead, dead:payload, dead:info, result:<id>, ...)
-- ARGV: [1] prefix, [2] id, [3] token, [4] reason, [5] dead_letter_max, [6] dead_letter_ttl ms,
--       [7..] the settle tail as in complete.lua ([4..] there)
-- Returns: 1 settled, 0 stale delivery.
local settled = settle_dead(2, now_ms())
return settled
