-- history_read: newest first, a batch of history entries and those among them that may
-- match the query's other filters (a cheap pre-filter: the caller checks each record exactly).
-- KEYS: none (history, the index stream)
-- ARGV: [1] prefix, [2] index key suffix (':n:<name>', ':s:<state>' or ':q:<queue>'; '' for
--       the main stream), [3] highest id (XREVRANGE bound: '+', '(<id>' or '<ms>'),
--       [4] lowest id, [5] entries to read, [6] k, [7] e, then k needles the entry's
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
else
  entries = redis.call('XREVRANGE', hk .. ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
end
local k = tonumber(ARGV[6])
local e = tonumber(ARGV[7])
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
  if keep then
    text = field(fields, 'r')
    first = 8 + k  -- the JSON needles
    if text == nil then
      text = (field(fields, 'm') or '') .. '\0' .. (field(fields, 'p') or '')
      first = 8 + k + e  -- the raw needles
    end
    for j = first, first + e - 1 do
      if keep and not string.find(text, ARGV[j], 1, true) then keep = false end
    end
  end
  if keep and k > 0 then
    local low = string.lower(text)
    for j = 8, 7 + k do
      if keep and not string.find(low, ARGV[j], 1, true) then keep = false end
    end
  end
  if keep then
    out[#out + 1] = id
    out[#out + 1] = fields
  end
end
return out
