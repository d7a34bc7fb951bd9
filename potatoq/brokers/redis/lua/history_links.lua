-- history_links: the task page's chain and group links (Broker.history_links).
-- KEYS: none (history:lp:<parent id>, history:lg:<group id>)
-- ARGV: [1] prefix, [2] ms a link is kept (task_history_max_age), then per record that has
--       a parent or a group: its task id, parent id ('' for none), group id ('' for none),
--       finish time (epoch seconds) and what a page shows of it (history_links.py: JSON).
-- One HASH per parent and per group; field: the task id, value: '<finish time> <JSON>' of
-- its newest record (a retry's record is replaced by the next one's). Each key expires
-- max_age after its last write, so no trim visits them and the history_append indexes'
-- registry stays small. Sent with history_append, in the same round trip: a page shows
-- only this much of a relative, so the stream's entry ids aren't needed here.
-- Returns: the number of links written.
local hk = ARGV[1] .. 'history'
local ttl = ARGV[2]
local n = 0
for i = 3, #ARGV, 5 do
  local id, finished = ARGV[i], tonumber(ARGV[i + 3])
  local keys = {}
  if ARGV[i + 1] ~= '' then keys[#keys + 1] = hk .. ':lp:' .. ARGV[i + 1] end
  if ARGV[i + 2] ~= '' then keys[#keys + 1] = hk .. ':lg:' .. ARGV[i + 2] end
  for _, key in ipairs(keys) do
    local old = redis.call('HGET', key, id)
    -- records of one task may come from several workers' buffers, out of order
    if not old or tonumber(string.match(old, '^%S+')) <= finished then
      redis.call('HSET', key, id, ARGV[i + 3] .. ' ' .. ARGV[i + 4])
      n = n + 1
    end
    redis.call('PEXPIRE', key, ttl)
  end
end
return n
