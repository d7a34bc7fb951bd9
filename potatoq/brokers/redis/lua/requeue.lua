-- requeue: put a running task back, ready now, in its original place in the queue.
-- A graceful shutdown (crashed = '0') doesn't count the delivery; a crash does.
-- KEYS: none (job:<id>, q:<queue>:active/ready/marker)
-- ARGV: [1] prefix, [2] id, [3] token, [4] crashed '1' or '0'
-- Returns: 1 settled, 0 stale delivery.
local settled = settle_requeue(2, now_ms())
return settled
