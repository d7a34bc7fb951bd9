-- limit_usage: every concurrency limit key that has running or parked tasks, or an override.
-- KEYS: none (limits:running/override/carried/parked, limit:<key>:parked)
-- ARGV: [1] prefix
-- Returns: a list of {key, limit or '', running, parked, overridden 0/1}
local keys, seen = {}, {}
local function add(list)
  for i = 1, #list do
    if not seen[list[i]] then
      seen[list[i]] = true
      keys[#keys + 1] = list[i]
    end
  end
end
add(redis.call('HKEYS', P .. 'limits:running'))
add(redis.call('HKEYS', P .. 'limits:override'))
add(redis.call('SMEMBERS', P .. 'limits:parked'))
table.sort(keys)
local out = {}
for i = 1, #keys do
  local lk = keys[i]
  local override = redis.call('HGET', P .. 'limits:override', lk)
  out[i] = {lk, override or redis.call('HGET', P .. 'limits:carried', lk) or '',
            tonumber(redis.call('HGET', P .. 'limits:running', lk)) or 0,
            redis.call('ZCARD', P .. 'limit:' .. lk .. ':parked'), override and 1 or 0}
end
return out
