-- complete: remove a finished task, write its result, join its chord and enqueue its
-- follow-ups, all fenced by the delivery's token.
-- KEYS: none (job:<id>, q:<queue>:active, result:<id>, chord:<group>, follow-ups' queues)
-- ARGV: [1] prefix, [2] id, [3] token, [4] result ('' = none), [5] result ttl ms,
--       [6] chord group ('' = none), [7] chord index, [8] chord size, [9] chord value,
--       [10..14] chord callback (id, queue, priority, due_ms, payload),
--       [15] n follow-ups, then n x (id, queue, priority, due_ms, payload)
-- Returns: 1 settled, 0 stale delivery (nothing changed).
local settled = settle_complete(2, now_ms())
return settled
