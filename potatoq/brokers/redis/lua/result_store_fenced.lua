-- result_store_fenced: over a stored result, write only if its fence is not higher (a late
-- write of an older claim is refused, see the fenced writes in potatoq/brokers/records.py) or, with keep_ready,
-- only if its state is not ready (revoke).
-- KEYS: none (result:<id>, waiting:<id>, notify:<id>)
-- ARGV: [1] prefix, [2] task id, [3] encoded ResultRecord with its fence, [4] ttl ms,
--       [5] fence, [6] keep_ready ('1' or '0')
-- Returns: 1 if written, else 0.
local stored = redis.call('GET', k_result(ARGV[2]))
if stored then
  local ok, old = pcall(cjson.decode, stored)
  if ok and type(old) == 'table' then
    if ARGV[6] == '1' then
      local s = old.state
      if s == 'SUCCESS' or s == 'FAILURE' or s == 'REVOKED' then return 0 end
    elseif (tonumber(old.fence) or 0) > tonumber(ARGV[5]) then
      return 0
    end
  end
end
write_result(ARGV[2], ARGV[3], ARGV[4])
return 1
