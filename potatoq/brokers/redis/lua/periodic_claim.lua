-- periodic_claim: the first caller for (name, fire time) records it and enqueues the run.
-- KEYS: none (periodic:<name>:<ts>, and the message's queue keys)
-- ARGV: [1] prefix, [2] name, [3] fire time (ms), [4] ttl ms of the record,
--       [5] '1' if a message follows, [6..10] message (id, queue, priority, due_ms, payload)
-- Returns: 1 for the one caller that claimed this fire time, else 0.
local key = P .. 'periodic:' .. ARGV[2] .. ':' .. ARGV[3]
if not redis.call('SET', key, '1', 'NX', 'PX', ARGV[4]) then return 0 end
-- The newest fire time per entry, for "last run" (RedisBroker.last_fire_times): the keys
-- above expire, and finding them again would mean scanning the whole keyspace.
local last = P .. 'periodic:last'
if (tonumber(redis.call('HGET', last, ARGV[2])) or -1) < tonumber(ARGV[3]) then
  redis.call('HSET', last, ARGV[2], ARGV[3])
end
if ARGV[5] == '1' then
  enqueue_many({{ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]}}, now_ms())
end
return 1
