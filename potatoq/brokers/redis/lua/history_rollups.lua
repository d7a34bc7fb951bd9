-- history_rollups: one task name's per-minute rollups, for the dashboard's charts (see
-- history_append.lua, which writes them, and potatoq/brokers/history_rollup.py).
-- KEYS: none (history:m:<minute>:<name>, in the history stream's slot on a cluster)
-- ARGV: [1] prefix, [2] name ('' for every task), [3] first minute, [4] the minute after
--       the last (a 7-day chart reads 10,080 hashes in this one call)
-- Returns: minute, its HGETALL reply, ... for the minutes that have a rollup.
local hk = ARGV[1] .. 'history'
local out = {}
for m = tonumber(ARGV[3]), tonumber(ARGV[4]) - 1 do
  local fields = redis.call('HGETALL', hk .. ':m:' .. string.format('%d', m) .. ':' .. ARGV[2])
  if #fields > 0 then
    out[#out + 1] = m
    out[#out + 1] = fields
  end
end
return out
