-- cluster_relay_enqueue: enqueue one message relayed from an outbox entry (cluster layout),
-- at most once per mark, so a relay that runs twice (the settling worker, then a recovery
-- round after it died) doesn't run a follow-up twice.
-- KEYS: [1] the queue's prefix (routing only)
-- ARGV: [1] prefix, [2] mark, [3] mark ttl ms, [4..8] message (id, queue, priority, due_ms, payload)
-- Returns: 1 if enqueued now, 0 if this mark was relayed already.
if not redis.call('SET', P .. 'relayed:' .. ARGV[2], '1', 'NX', 'PX', ARGV[3]) then return 0 end
enqueue_many({{ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]}}, now_ms())
return 1
