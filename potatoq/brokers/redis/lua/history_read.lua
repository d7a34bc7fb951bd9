-- history_read: newest first, the history records one filter index points at.
-- KEYS: none (history, the index stream)
-- ARGV: [1] prefix, [2] index key suffix (':n:<name>', ':s:<state>' or ':q:<queue>'),
--       [3] highest id (XREVRANGE bound: '+', '(<id>' or '<ms>'), [4] lowest id, [5] count
-- Returns: a list of {id, fields}, one per index entry read (fields: the entry's field and
-- value list, see history_append.lua); fields is false when the main stream no longer has
-- it (trimmed by MAXLEN ~ before the index was).
local hk = ARGV[1] .. 'history'
local ids = redis.call('XREVRANGE', hk .. ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local out = {}
for i = 1, #ids do
  local id = ids[i][1]
  local entry = redis.call('XRANGE', hk, id, id)[1]
  local fields = false
  if entry then fields = entry[2] end
  out[i] = {id, fields}
end
return out
