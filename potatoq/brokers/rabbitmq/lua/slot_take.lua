-- Take a concurrency slot of ARGV[2] for one delivery, or record its task as waiting.
-- ARGV: prefix, key, max carried by the task, holder (delivery token), lease ms,
-- task id, ms the task stays listed as waiting when parked.
-- Slots are a sorted set of holders scored by lease expiry: a holder that stopped
-- renewing (a killed process) drops out at the next take, so a slot never leaks.
local p, key, carried, holder = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local lease, task, listed = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SADD', p .. 'cl:keys', key)
redis.call('HSET', p .. 'cl:max', key, carried)
local limit = tonumber(redis.call('HGET', p .. 'cl:set', key) or carried)
local run, wait = p .. 'cl:run:' .. key, p .. 'cl:wait:' .. key
redis.call('ZREMRANGEBYSCORE', run, '-inf', now)
redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
if redis.call('ZSCORE', run, holder) or redis.call('ZCARD', run) < limit then
  redis.call('ZADD', run, now + lease, holder)
  redis.call('ZREM', wait, task)
  return 1
end
redis.call('ZADD', wait, now + listed, task)
return 0
