-- history_read: newest first, a batch of history entries and the records among them that
-- contain every needle (a cheap pre-filter: the caller checks each record exactly).
-- KEYS: none (history, the index stream)
-- ARGV: [1] prefix, [2] index key suffix (':n:<name>', ':s:<state>' or ':q:<queue>'; '' for
--       the main stream), [3] highest id (XREVRANGE bound: '+', '(<id>' or '<ms>'),
--       [4] lowest id, [5] entries to read, [6] k, then k needles the record's lower-cased
--       text must hold, then needles its text must hold as is.
-- Returns: {entries read, id of the last one read (false if none), id1, record1, ...}: the
-- records that hold the needles (an index entry whose record was trimmed is skipped).
local hk = ARGV[1] .. 'history'
local entries
if ARGV[2] == '' then
  entries = redis.call('XREVRANGE', hk, ARGV[3], ARGV[4], 'COUNT', ARGV[5])
else
  entries = redis.call('XREVRANGE', hk .. ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
end
local k = tonumber(ARGV[6])
local out = {#entries, false}
if #entries > 0 then out[2] = entries[#entries][1] end
for i = 1, #entries do
  local id = entries[i][1]
  local record
  if ARGV[2] == '' then
    record = entries[i][2][2]
  else
    local entry = redis.call('XRANGE', hk, id, id)[1]
    if entry then record = entry[2][2] end
  end
  local keep = record ~= nil
  for j = 7 + k, #ARGV do
    if keep and not string.find(record, ARGV[j], 1, true) then keep = false end
  end
  if keep and k > 0 then
    local low = string.lower(record)
    for j = 7, 6 + k do
      if keep and not string.find(low, ARGV[j], 1, true) then keep = false end
    end
  end
  if keep then
    out[#out + 1] = id
    out[#out + 1] = record
  end
end
return out
