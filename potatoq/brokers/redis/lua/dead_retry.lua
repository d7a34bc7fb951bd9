-- dead_retry: put dead letters back on their queue, ready now, payload unchanged.
-- KEYS: none (dead, dead:payload, dead:info, job:<id>, q:<queue>:ready/marker)
-- ARGV: [1] prefix, [2] '1' = all of them, else [3..] the ids
-- Returns: how many were put back (a letter whose id is waiting or running stays).
local now = now_ms()
local ids = {}
if ARGV[2] == '1' then
  ids = redis.call('ZRANGE', P .. 'dead', 0, -1)
else
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local moved, armed = 0, {}
for i = 1, #ids do
  local id = ids[i]
  local payload = redis.call('HGET', P .. 'dead:payload', id)
  local info = redis.call('HGET', P .. 'dead:info', id)
  if payload and info then
    local meta = cjson.decode(info)
    -- A letter whose id is waiting or running again stays dead: nothing is overwritten.
    if enqueue_one({id, meta.queue, meta.priority or 0, '', payload}, now, armed) == 1 then
      moved = moved + 1
      redis.call('ZREM', P .. 'dead', id)
      redis.call('HDEL', P .. 'dead:payload', id)
      redis.call('HDEL', P .. 'dead:info', id)
    end
  end
end
return moved
