-- Every concurrency limit in use, waited on or overridden: {key, limit, running, waiting,
-- overridden}. Keys with none of these are forgotten. ARGV: prefix.
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, key in ipairs(redis.call('SMEMBERS', p .. 'cl:keys')) do
  local run, wait = p .. 'cl:run:' .. key, p .. 'cl:wait:' .. key
  redis.call('ZREMRANGEBYSCORE', run, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
  local running, waiting = redis.call('ZCARD', run), redis.call('ZCARD', wait)
  local set = redis.call('HGET', p .. 'cl:set', key)
  if running == 0 and waiting == 0 and not set then
    redis.call('SREM', p .. 'cl:keys', key)
    redis.call('HDEL', p .. 'cl:max', key)
  else
    local limit = set or redis.call('HGET', p .. 'cl:max', key) or ''
    out[#out + 1] = {key, limit, running, waiting, set and 1 or 0}
  end
end
return out
