-- limit_set: set (or with '' remove) the run-time concurrency limit of a key, then move as
-- many parked tasks back to ready as the new limit has free slots (all of them on removal:
-- a claim parks again any that still have to wait).
-- KEYS: none (limits:override, limits:running, limit:<key>:parked, q:<queue>:ready/marker)
-- ARGV: [1] prefix, [2] key, [3] limit ('' = remove the override)
-- Returns: 1
local lk, limit = ARGV[2], tonumber(ARGV[3])
if limit then
  redis.call('HSET', P .. 'limits:override', lk, limit)
  local running = tonumber(redis.call('HGET', P .. 'limits:running', lk)) or 0
  if limit > running then unpark(lk, limit - running) end
else
  redis.call('HDEL', P .. 'limits:override', lk)
  unpark(lk, redis.call('ZCARD', P .. 'limit:' .. lk .. ':parked'))
end
return 1
