-- claim: promote due delayed tasks, then lease the best ready task of the first queue
-- (in the order given) that has one; re-arm that queue's marker while work remains.
-- KEYS: none (q:<queue>:ready/delayed/active/marker and job:<id> are built from the prefix)
-- ARGV: [1] prefix, [2] fencing token, [3] lease ms, [4] node, [5] pid, [6] n, [7..] queues
-- Returns: {id, queue, payload, deliveries, token, claimed_ms} or nil.
return claim_from_argv(2, now_ms(), true)
