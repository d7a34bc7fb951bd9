-- Take a rate token of ARGV[2] now (returns 0), or reserve the next one (returns the ms
-- until it is due): GCRA on the key's theoretical arrival time (ms), see brokers/limits.py.
-- A reserved token is the parked task's: it runs when it comes back, unchecked.
-- ARGV: prefix, key, ms per token carried, burst carried, task id, ms listed as waiting
-- beyond its token time.
local p, key, task, listed = ARGV[1], ARGV[2], ARGV[5], tonumber(ARGV[6])
local step, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SADD', p .. 'rl:keys', key)
redis.call('HSET', p .. 'rl:seen', key, ARGV[3] .. '|' .. ARGV[4])
local set = redis.call('HGET', p .. 'rl:set', key)
if set then
  local s, b = string.match(set, '^([^|]*)|(.*)$')
  step, burst = tonumber(s), tonumber(b)
end
local tatkey, wait = p .. 'rl:tat:' .. key, p .. 'rl:wait:' .. key
redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
local tat = math.max(tonumber(redis.call('GET', tatkey) or '0'), now)
local due = math.max(now, tat - (burst - 1) * step)
redis.call('SET', tatkey, string.format('%.3f', tat + step), 'PX', math.ceil(tat + step - now) + 60000)
if due <= now then
  return 0
end
redis.call('ZADD', wait, due + listed, task)
return math.ceil(due - now)
