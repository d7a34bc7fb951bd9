-- Hold unique keys at publish: for each (key, task id, ttl ms, stale holder) quadruple,
-- the key is set to the task unless another task holds it; the reply lists
-- {index from 1, holder id} of each message that is a duplicate. A key held by the same
-- id (the same message published again) stays its own; "stale holder" names a holder the
-- caller found finished (its result is ready), whose key is taken over.
-- ARGV: prefix, then the quadruples.
local p = ARGV[1]
local out = {}
for i = 2, #ARGV, 4 do
  local key, task, ttl, stale = p .. 'uq:' .. ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local holder = redis.call('GET', key)
  if holder and holder ~= task and holder ~= stale then
    out[#out + 1] = (i + 2) / 4
    out[#out + 1] = holder
  else
    redis.call('SET', key, task, 'PX', ttl)
    redis.call('SET', p .. 'uqid:' .. task, ARGV[i], 'PX', ttl)
  end
end
return out
