-- history_append: task-history records into the capped stream and its filter indexes.
-- KEYS: none (history, history:n:<name>, history:s:<state>, history:q:<queue>, history:indexes)
-- ARGV: [1] prefix, [2] max_count, [3] '1' to trim exactly now, [4] oldest ms kept (by age),
--       then per record its kind and
--       'r': name ('' for none), state, queue, the encoded record (stored as field r), or
--       'c': a compact record (history_compact.py): its meta string (name, state, queue,
--            ... joined by NULs; stored as field m) and the task's payload (field p).
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
  local name, state, queue, id
  if ARGV[i] == 'c' then
    local meta = ARGV[i + 1]
    local a = string.find(meta, '\0', 1, true)
    local b = string.find(meta, '\0', a + 1, true)
    local c = string.find(meta, '\0', b + 1, true)
    name, state, queue = string.sub(meta, 1, a - 1), string.sub(meta, a + 1, b - 1), string.sub(meta, b + 1, c - 1)
    id = redis.call('XADD', hk, 'MAXLEN', '~', maxc, '*', 'm', meta, 'p', ARGV[i + 2])
    i = i + 3
  else
    name, state, queue = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
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
