-- rate_usage: every rate limit key with tasks waiting for a token, tokens in use or an
-- override. Keys whose bucket is full again, with nothing waiting and no override, are
-- forgotten here (they are as good as absent).
-- KEYS: none (rates:*, rate:<key>:waiting, job:<id>)
-- ARGV: [1] prefix
-- Returns: a list of {key, ms per token or '', burst or '', tat ms, waiting, overridden 0/1, now ms}
local now = now_ms()
local keys, seen = {}, {}
local function add(list)
  for i = 1, #list do
    if not seen[list[i]] then
      seen[list[i]] = true
      keys[#keys + 1] = list[i]
    end
  end
end
add(redis.call('HKEYS', P .. 'rates:tat'))
add(redis.call('HKEYS', P .. 'rates:override'))
add(redis.call('SMEMBERS', P .. 'rates:waiting'))
table.sort(keys)
local out = {}
for i = 1, #keys do
  local rk = keys[i]
  local wk = P .. 'rate:' .. rk .. ':waiting'
  local ids = redis.call('SMEMBERS', wk)
  local waiting = 0
  for j = 1, #ids do  -- a revoked or purged task leaves its id behind: dropped here
    local job = redis.call('HMGET', k_job(ids[j]), 'state', 'rw')
    if job[1] == 'delayed' and job[2] then waiting = waiting + 1 else redis.call('SREM', wk, ids[j]) end
  end
  if waiting == 0 then redis.call('SREM', P .. 'rates:waiting', rk) end
  local override = redis.call('HGET', P .. 'rates:override', rk)
  local tat = tonumber(redis.call('HGET', P .. 'rates:tat', rk)) or 0
  if not override and waiting == 0 and tat < now then
    redis.call('HDEL', P .. 'rates:tat', rk)
    redis.call('HDEL', P .. 'rates:defer', rk)
    redis.call('HDEL', P .. 'rates:carried', rk)
  else
    local rate = override or redis.call('HGET', P .. 'rates:carried', rk) or ''
    local ri, rb = string.match(rate, '^(%S+) (%S+)$')
    out[#out + 1] = {rk, ri or '', rb or '', tostring(tat), waiting, override and 1 or 0, now}
  end
end
return out
