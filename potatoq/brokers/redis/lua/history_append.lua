-- history_append: task-history records into the capped stream and its filter indexes.
-- KEYS: none (history, history:n:<name>, history:s:<state>, history:q:<queue>, history:indexes)
-- ARGV: [1] prefix, [2] max_count, [3] '1' to trim exactly now, [4] oldest ms kept (by age),
--       [5] how many arguments the rollups take (0: none; they follow, see the end),
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
local i = 6 + tonumber(ARGV[5])  -- the records follow the rollups
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
-- Rollups per minute and per hour (history_rollup.py: the dashboard's charts read these,
-- not the stream): ARGV[6] their TTL (seconds: max_age, plus a little), then per rollup:
-- its span (1: a minute, 60: an hour), the minute since the epoch it starts at, the name
-- ('' for every task), how many fields, and (field, increment) pairs. HASH
-- <hk>:m<span>:<minute>:<name>, listed in the ZSET <hk>:minutes by minute; same hash tag
-- as the stream on a cluster (the prefix), so the same slot.
local rollups_end = 5 + tonumber(ARGV[5])
if rollups_end > 5 then
  local rollup_ttl, minutes = ARGV[6], hk .. ':minutes'
  local j = 7
  while j <= rollups_end do
    local rkey = hk .. ':m' .. ARGV[j] .. ':' .. ARGV[j + 1] .. ':' .. ARGV[j + 2]
    local last = j + 3 + 2 * tonumber(ARGV[j + 3])
    for f = j + 4, last, 2 do
      redis.call('HINCRBY', rkey, ARGV[f], ARGV[f + 1])
    end
    redis.call('EXPIRE', rkey, rollup_ttl)
    redis.call('ZADD', minutes, ARGV[j + 1], rkey)
    j = last + 1
  end
  redis.call('EXPIRE', minutes, rollup_ttl)
end
if ARGV[3] == '1' then
  -- the exact trim drops the rollups that start before the oldest entry kept, less two
  -- hours (ids are append times, and a record may be appended up to an hour after it
  -- finished: APPEND_LAG in history.py; an hour's rollup starts up to an hour before its
  -- records), or before the age cutoff (an empty stream)
  local oldest = redis.call('XRANGE', hk, '-', '+', 'COUNT', 1)[1]
  local oldest_ms = oldest and tonumber(string.match(oldest[1], '^%d+')) - 7200000 or tonumber(ARGV[4])
  local below = '(' .. math.floor(oldest_ms / 60000)
  local minutes = hk .. ':minutes'
  for _, rkey in ipairs(redis.call('ZRANGEBYSCORE', minutes, '-inf', below)) do
    redis.call('DEL', rkey)
  end
  redis.call('ZREMRANGEBYSCORE', minutes, '-inf', below)
end
return n
