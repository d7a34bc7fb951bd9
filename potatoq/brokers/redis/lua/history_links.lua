-- history_links: the task page's chain and group links (Broker.history_links).
-- KEYS: none (history, history:lp:<parent id>, history:lg:<group id>)
-- ARGV: [1] prefix, [2] ms a record is kept (task_history_max_age), [3] task_history_max_count,
--       then per record that has a parent or a group: its task id, parent id ('' for
--       none), group id ('' for none), finish time (epoch seconds) and what a page shows of
--       it (history_links.py: JSON).
-- One HASH per parent and per group; field: the task id, value: '<finish time> <JSON>' of
-- its newest record (a retry's record is replaced by the next one's). Sent with
-- history_append, in the same round trip: a page shows only this much of a relative, so
-- the stream's entry ids aren't needed here.
-- A key expires when the records it points to would be gone: max_age after its last
-- write, or, once the stream is full (max_count), after the time the stream now spans
-- (its oldest entry to now), so a busy deployment keeps no more links than records, and
-- no trim has to visit them.
-- Returns: the number of links written.
local hk = ARGV[1] .. 'history'
local ttl = tonumber(ARGV[2])
if redis.call('XLEN', hk) >= tonumber(ARGV[3]) then
  local first = redis.call('XRANGE', hk, '-', '+', 'COUNT', 1)[1]
  if first then
    local span = now_ms() - tonumber(string.match(first[1], '^%d+'))
    ttl = math.max(1000, math.min(ttl, span))
  end
end
local n = 0
local expiring = {}  -- keys given their ttl by this call: one PEXPIRE each, not one per record
for i = 4, #ARGV, 5 do
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
    if not expiring[key] then
      expiring[key] = true
      redis.call('PEXPIRE', key, ttl)
    end
  end
end
return n
