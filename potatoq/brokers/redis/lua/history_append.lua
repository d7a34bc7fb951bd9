-- history_append: task-history records into the capped stream and its filter indexes.
-- KEYS: none (history, history:n:<name>, history:s:<state>, history:q:<queue>, history:indexes)
-- ARGV: [1] prefix, [2] max_count, [3] '1' to trim exactly now, [4] oldest ms kept (by age),
--       then per record: name ('' for none), state, queue, kind, and by kind
--       'r': the encoded record (1 argument; stored as field r), or
--       'c': a compact record (history_compact.py; 7 arguments): payload, finished,
--            started (both in µs), deliveries, worker node, pid, extra ('' for none), stored as the
--            fields p, f, t, d, w, i and x, with s (state) and q (queue).
-- Each index is a STREAM whose entry ids are the ids of the main stream's entries it
-- covers (field 'i', empty): a filtered read walks it instead of the whole stream. The
-- indexes are trimmed with the main stream: never older than its oldest entry.
-- Returns: the number of records appended.
local hk = ARGV[1] .. 'history'
local reg = hk .. ':indexes'
local maxc = ARGV[2]
local n = 0
local registered = {}  -- index keys already added to the registry by this call
local i = 5
while i <= #ARGV do
  local name, state, queue = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local id
  if ARGV[i + 3] == 'c' then
    local f = {'XADD', hk, 'MAXLEN', '~', maxc, '*', 'p', ARGV[i + 4], 's', state, 'q', queue,
               'f', ARGV[i + 5], 't', ARGV[i + 6], 'd', ARGV[i + 7], 'w', ARGV[i + 8],
               'i', ARGV[i + 9]}
    if ARGV[i + 10] ~= '' then
      f[#f + 1] = 'x'
      f[#f + 1] = ARGV[i + 10]
    end
    id = redis.call(unpack(f))
    i = i + 11
  else
    id = redis.call('XADD', hk, 'MAXLEN', '~', maxc, '*', 'r', ARGV[i + 4])
    i = i + 5
  end
  local idx = {hk .. ':s:' .. state, hk .. ':q:' .. queue}
  if name ~= '' then idx[3] = hk .. ':n:' .. name end
  for j = 1, #idx do
    -- pcall: an index holding a higher id (stream deleted, server clock set back) refuses
    -- this one; the record is kept anyway
    redis.pcall('XADD', idx[j], 'MAXLEN', '~', maxc, id, 'i', '')
    if not registered[idx[j]] then
      registered[idx[j]] = true
      redis.call('SADD', reg, idx[j])
    end
  end
  n = n + 1
end
if ARGV[3] == '1' then
  -- exact now and then: "~" leaves whole stream nodes (100 entries) behind
  redis.call('XTRIM', hk, 'MAXLEN', maxc)
  redis.call('XTRIM', hk, 'MINID', ARGV[4])
  local first = redis.call('XRANGE', hk, '-', '+', 'COUNT', 1)[1]
  for _, key in ipairs(redis.call('SMEMBERS', reg)) do
    if first then redis.call('XTRIM', key, 'MINID', first[1]) end
    if not first or redis.call('XLEN', key) == 0 then
      redis.call('DEL', key)
      redis.call('SREM', reg, key)
    end
  end
end
return n
