-- Every rate limit with tokens in use, waiting tasks or an override: {key, ms per token,
-- burst, tat ms, waiting, overridden, now ms}. Idle keys are forgotten. ARGV: prefix.
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, key in ipairs(redis.call('SMEMBERS', p .. 'rl:keys')) do
  local wait = p .. 'rl:wait:' .. key
  redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
  local waiting = redis.call('ZCARD', wait)
  local tat = redis.call('GET', p .. 'rl:tat:' .. key)
  local set = redis.call('HGET', p .. 'rl:set', key)
  if waiting == 0 and not set and (not tat or tonumber(tat) <= now) then
    redis.call('SREM', p .. 'rl:keys', key)
    redis.call('HDEL', p .. 'rl:seen', key)
  else
    local s, b = string.match(set or redis.call('HGET', p .. 'rl:seen', key) or '|', '^([^|]*)|(.*)$')
    out[#out + 1] = {key, s, b, tat or tostring(now), waiting, set and 1 or 0, now}
  end
end
return out
