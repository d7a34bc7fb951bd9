-- history_rollups: one task name's rollups, for the dashboard's charts (see
-- history_append.lua, which writes them, and potatoq/brokers/history_rollup.py).
-- KEYS: none (history:m<span>:<minute>:<name>, in the history stream's slot on a cluster)
-- ARGV: [1] prefix, [2] name ('' for every task), [3] span (1: minutes, 60: hours),
--       [4] first minute, [5] the minute after the last (a 7-day chart: 168 hours)
-- Returns: minute, its HGETALL reply, ... for those that have a rollup.
local hk = ARGV[1] .. 'history:m' .. ARGV[3] .. ':'
local span = tonumber(ARGV[3])
local out = {}
local first = tonumber(ARGV[4])
first = first + (-first) % span  -- the first one that starts in the window
for m = first, tonumber(ARGV[5]) - 1, span do
  local fields = redis.call('HGETALL', hk .. string.format('%d', m) .. ':' .. ARGV[2])
  if #fields > 0 then
    out[#out + 1] = m
    out[#out + 1] = fields
  end
end
return out
