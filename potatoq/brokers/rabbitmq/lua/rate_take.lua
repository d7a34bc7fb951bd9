-- Take a rate token of ARGV[2] now (returns {0}), or reserve the next one (returns {ms until
-- it is due, due ms, generation}): GCRA on the key's theoretical arrival time (ms), see
-- brokers/limits.py. A reserved token is the parked task's own: when the task comes back
-- with it (ARGV[7], ARGV[8]: its due time and the generation it was reserved in) it runs
-- once that time has come, or parks again for the rest. A rate set at run time starts a
-- new generation: tokens reserved before it are forgotten and taken again at the new rate.
-- ARGV: prefix, key, ms per token carried, burst carried, task id, ms listed as waiting
-- beyond its token time, reserved due ms or '', its generation or ''.
local p, key, task, listed = ARGV[1], ARGV[2], ARGV[5], tonumber(ARGV[6])
local step, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = p .. 'rl:wait:' .. key
local gen = tonumber(redis.call('GET', p .. 'rl:gen:' .. key) or '0')
-- The task runs now if ``due`` has come, else it waits (listed) until then.
local function answer(due)
  if due <= now then
    redis.call('ZREM', wait, task)
    return {0}
  end
  redis.call('ZADD', wait, due + listed, task)
  return {due - now, due, gen}
end
if ARGV[7] ~= '' and tonumber(ARGV[8]) == gen then
  return answer(tonumber(ARGV[7]))
end
redis.call('SADD', p .. 'rl:keys', key)
redis.call('HSET', p .. 'rl:seen', key, ARGV[3] .. '|' .. ARGV[4])
local set = redis.call('HGET', p .. 'rl:set', key)
if set then
  local s, b = string.match(set, '^([^|]*)|(.*)$')
  step, burst = tonumber(s), tonumber(b)
end
local tatkey = p .. 'rl:tat:' .. key
redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
local tat = math.max(tonumber(redis.call('GET', tatkey) or '0'), now)
redis.call('SET', tatkey, string.format('%.3f', tat + step), 'PX', math.ceil(tat + step - now) + 60000)
return answer(math.max(now, math.ceil(tat - (burst - 1) * step)))
