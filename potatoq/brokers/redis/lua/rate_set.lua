-- rate_set: set (or with '' remove) the run-time rate of a key. The key starts again with a
-- full burst, and its tasks waiting for a token are due now (spread again at the new rate
-- by the claims that find them).
-- KEYS: none (rates:*, rate:<key>:waiting, q:<queue>:delayed/marker, job:<id>)
-- ARGV: [1] prefix, [2] key, [3] ms per token ('' = remove the override), [4] burst
-- Returns: the number of waiting tasks made due
local rk = ARGV[2]
if ARGV[3] ~= '' then
  redis.call('HSET', P .. 'rates:override', rk, ARGV[3] .. ' ' .. ARGV[4])
else
  redis.call('HDEL', P .. 'rates:override', rk)
end
redis.call('HDEL', P .. 'rates:tat', rk)
redis.call('HDEL', P .. 'rates:defer', rk)
local now = now_ms()
local wk = P .. 'rate:' .. rk .. ':waiting'
local ids = redis.call('SMEMBERS', wk)
local n = 0
for i = 1, #ids do
  local job = redis.call('HMGET', k_job(ids[i]), 'queue', 'state', 'rw')
  if job[1] and job[2] == 'delayed' and job[3] then
    redis.call('HSET', k_job(ids[i]), 'due', now)
    redis.call('ZADD', k_delayed(job[1]), now, ids[i])
    arm(job[1])
    n = n + 1
  end
end
redis.call('DEL', wk)
redis.call('SREM', P .. 'rates:waiting', rk)
for i = 1, #ids do redis.call('HDEL', k_job(ids[i]), 'rw') end
return n
