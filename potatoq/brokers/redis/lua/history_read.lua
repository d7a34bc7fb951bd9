-- history_read: newest first, a batch of history entries and those among them that may
-- match the query's other filters (a cheap pre-filter: the caller checks each record exactly).
-- KEYS: none (history, the index stream)
-- ARGV: [1] prefix, [2] index key suffix (':n:<name>', ':s:<state>' or ':q:<queue>'; '' for
--       the main stream; ':t:<task id>' for a task's ids in the task index, see
--       history_append.lua; ':u:<state>,<state>...' for the union of those states'
--       indexes, merged newest first: the records with exception text), [3] highest id (XREVRANGE bound: '+', '(<id>' or '<ms>'),
--       [4] lowest id, [5] entries to read, [6] k, [7] e, [8] and [9] the finish times
--       (epoch seconds, '' for none) a record must be at or after and before, then k
--       needles the entry's
--       lower-cased text must hold, e needles a full record's JSON must hold as is, and e
--       needles a compact entry's text must hold as is (the same filters, as raw values).
-- An entry is a full record (field r: its JSON) or a compact one (fields m and p, see
-- history_append.lua); a compact entry's text is m and p joined by a NUL.
-- Returns: {entries read, id of the last one read (false if none), id1, fields1, ...}: the
-- entries that hold the needles, each with its field/value list (an index entry whose record
-- was trimmed is skipped).
local hk = ARGV[1] .. 'history'
local entries
if ARGV[2] == '' then
  entries = redis.call('XREVRANGE', hk, ARGV[3], ARGV[4], 'COUNT', ARGV[5])
elseif string.sub(ARGV[2], 1, 3) == ':t:' then
  -- the task's ids in every bucket (oldest bucket first, each in append order), newest
  -- first within the bounds, as XREVRANGE would give them from an index stream
  local tid = string.sub(ARGV[2], 4)
  local function parse(bound)  -- {ms, seq or nil, exclusive}
    local excl = string.sub(bound, 1, 1) == '('
    if excl then bound = string.sub(bound, 2) end
    local ms, seq = string.match(bound, '^(%d+)-?(%d*)$')
    return {tonumber(ms), tonumber(seq), excl}
  end
  local top = ARGV[3] ~= '+' and parse(ARGV[3]) or nil
  local bottom = parse(ARGV[4])
  local function under_top(ms, seq)
    if not top then return true end
    if ms ~= top[1] then return ms < top[1] end
    if top[2] == nil then return true end  -- a bare ms: all of that millisecond
    if top[3] then return seq < top[2] end
    return seq <= top[2]
  end
  local function over_bottom(ms, seq)
    if ms ~= bottom[1] then return ms > bottom[1] end
    return seq >= (bottom[2] or 0)
  end
  local ids = {}
  for _, bucket in ipairs(redis.call('ZRANGE', hk .. ':tasks', 0, -1)) do
    local list = redis.call('HGET', bucket, tid)
    if list then
      for one in string.gmatch(list, '[^,]+') do ids[#ids + 1] = one end
    end
  end
  entries = {}
  local want = tonumber(ARGV[5])
  for j = #ids, 1, -1 do
    local ms, seq = string.match(ids[j], '^(%d+)-(%d+)$')
    ms, seq = tonumber(ms), tonumber(seq)
    if #entries >= want then break end
    if under_top(ms, seq) and over_bottom(ms, seq) then entries[#entries + 1] = {ids[j]} end
  end
elseif string.sub(ARGV[2], 1, 3) == ':u:' then
  -- the state indexes' ids within the bounds, merged newest first: each index is read in
  -- chunks (newest first) and the highest head taken, ARGV[5] times, so about ARGV[5] ids
  -- are read in all, not ARGV[5] from each
  local want = tonumber(ARGV[5])
  local CHUNK = 64
  local keys, lists, at, heads, done = {}, {}, {}, {}, {}
  local function head(l)  -- {ms, seq} of list l's next id (nil: none left): numbers, not text
    local list, j = lists[l], at[l]
    if j > #list then
      if done[l] then return nil end
      local top = #list > 0 and '(' .. list[#list][1] or ARGV[3]
      list = redis.call('XREVRANGE', keys[l], top, ARGV[4], 'COUNT', CHUNK)
      lists[l], at[l], j = list, 1, 1
      done[l] = #list < CHUNK
      if #list == 0 then return nil end
    end
    local ms, seq = string.match(list[j][1], '^(%d+)-(%d+)$')
    return {tonumber(ms), tonumber(seq)}
  end
  for state in string.gmatch(string.sub(ARGV[2], 4), '[^,]+') do
    local l = #keys + 1
    keys[l], lists[l], at[l], done[l] = hk .. ':s:' .. state, {}, 1, false
    heads[l] = head(l)
  end
  entries = {}
  while #entries < want do
    local best
    for l = 1, #keys do
      local h = heads[l]
      if h and (not best or h[1] > heads[best][1] or (h[1] == heads[best][1] and h[2] > heads[best][2])) then
        best = l
      end
    end
    if not best then break end
    entries[#entries + 1] = {lists[best][at[best]][1]}
    at[best] = at[best] + 1
    heads[best] = head(best)
  end
else
  entries = redis.call('XREVRANGE', hk .. ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
end
local k = tonumber(ARGV[6])
local e = tonumber(ARGV[7])
-- A time range: the ids read span more (a record is appended after it finishes, up to a
-- task's run later); the records outside it are left here, not sent back to be decoded.
local since, before = tonumber(ARGV[8]), tonumber(ARGV[9])
local out = {#entries, false}
if #entries > 0 then out[2] = entries[#entries][1] end

local function field(fields, name)
  for j = 1, #fields, 2 do
    if fields[j] == name then return fields[j + 1] end
  end
  return nil
end

for i = 1, #entries do
  local id = entries[i][1]
  local fields
  if ARGV[2] == '' then
    fields = entries[i][2]
  else
    local entry = redis.call('XRANGE', hk, id, id)[1]
    if entry then fields = entry[2] end
  end
  local keep = fields ~= nil
  local text, first
  if keep and (since or before) then
    local at
    local r = field(fields, 'r')
    if r then
      local p = string.find(r, '"finished_at":', 1, true)  -- a plain find: no pattern
      at = p and tonumber(string.match(r, '^[^,}]+', p + 14))
    else  -- a compact entry: the 4th of the meta's fields, in microseconds
      local us = string.match(field(fields, 'm') or '', '^[^%z]*%z[^%z]*%z[^%z]*%z(%d+)')
      at = us and tonumber(us) / 1e6
    end
    if at and ((since and at < since) or (before and at >= before)) then keep = false end
  end
  if keep then
    text = field(fields, 'r')
    first = 10 + k  -- the JSON needles
    if text == nil then
      text = (field(fields, 'm') or '') .. '\0' .. (field(fields, 'p') or '')
      first = 10 + k + e  -- the raw needles
    end
    for j = first, first + e - 1 do
      if keep and not string.find(text, ARGV[j], 1, true) then keep = false end
    end
  end
  if keep and k > 0 then
    local low = string.lower(text)
    for j = 10, 9 + k do
      if keep and not string.find(low, ARGV[j], 1, true) then keep = false end
    end
  end
  if keep then
    out[#out + 1] = id
    out[#out + 1] = fields
  end
end
return out
