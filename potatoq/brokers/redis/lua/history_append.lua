-- history_append: task-history records into the capped stream and its filter indexes.
-- KEYS: none (history, history:n:<name>, history:s:<state>, history:q:<queue>, history:indexes,
--       history:late, history:tasks, history:tasks:<id>)
-- ARGV: [1] prefix, [2] max_count, [3] '1' to trim exactly now, [4] oldest ms kept (by age),
--       then per record its kind and
--       'r': name ('' for none), state, queue, the encoded record (stored as field r), or
--       'c': a compact record (history_compact.py): its meta string (name, state, queue,
--            ... joined by NULs; stored as field m) and the task's payload (field p).
-- Each index is a STREAM whose entry ids are the ids of the main stream's entries it
-- covers (field 'i', empty): a filtered read walks it instead of the whole stream. The
-- indexes are trimmed with the main stream: never older than its oldest entry. SUCCESS
-- has none (most records are: it would be a near copy of the stream; history.py reads
-- SUCCESS from the stream). No XADD here caps its stream (MAXLEN ~ cost about a third of
-- an XADD): the exact trim (ARGV[3], about once per 200 records) caps them all.
-- (Per record, each XADD or other command costs the server about as much as the rest of
-- the script's work for it: the task index is written with two commands per call.)
-- A fourth index, 'history:late', holds the records appended LATE_MS or more after they
-- finished (held in a worker's buffer during a long task, or a clock apart): a time range
-- reads it for the ids past its end, and the stream itself only up to LATE_MS past it.
-- The task index: HASHes 'history:tasks:<first id>' (buckets), each mapping a task id to
-- the ids of its records in append order joined by ',', and the ZSET 'history:tasks' of
-- the buckets by the ms of their first id. A task's page reads its field in every bucket
-- (a few HGETs, history_read.lua) instead of walking the stream. Per-task keys would cost
-- a key per task (a stream key alone is 4 KiB) and outlive a count trim; a bucket goes
-- whole, on an exact trim, once every record it points at is trimmed.
-- Returns: the number of records appended.
local hk = ARGV[1] .. 'history'
local reg = hk .. ':indexes'
local maxc = ARGV[2]
local LATE_MS = 10000  -- history.py's LATE (its reads allow a second more)
local n = 0
local registered = {}  -- index keys already added to the registry by this call
-- task index: the bucket being filled and its size; a new one is started once it holds
-- an eighth of max_count tasks (so a trim leaves at most that many stale ones), at least
-- 1,024 and at most 65,536 (so a read of one task is at most max_count / 65,536 HGETs)
local treg = hk .. ':tasks'
local tcap = math.min(65536, math.max(1024, math.floor(tonumber(maxc) / 8)))
local tkey = redis.call('ZRANGE', treg, -1, -1)[1]
local tlen = tkey and redis.call('HLEN', tkey) or tcap
-- this call's task ids in the order first seen (and that record's id), each with its
-- record ids joined by ','; written below, one HMGET and one HSET per TASK_SLICE tasks
-- (or a bucket's room) instead of a HSETNX (and HGET, HSET) per record
local tids, order, firsts = {}, {}, {}
local TASK_SLICE = 512
-- The task id: at the head of the JSON object as potatoq writes it (a payload's 'id', a
-- record's 'task_id'), else decoded (an escape in it, another writer).
local PAYLOAD_ID, RECORD_ID = '^{"v":1,"id":"([^"\\]*)"', '^{"task_id":"([^"\\]*)"'
local function task_of(text, pattern, field)
  local tid = string.match(text, pattern)
  if tid then return tid end
  local ok, body = pcall(cjson.decode, text)
  if ok and type(body) == 'table' and type(body[field]) == 'string' then return body[field] end
  return nil
end
-- The charts' rollups are built from the stream by history_rollup_build.lua, after the
-- cursor 'history:rolled' (the last entry rolled up). Missing, it is set here, before the
-- first record: at the stream's newest entry, whose records (an older version's) have
-- their rollups already; so each record is rolled up once, on an upgrade too.
local rolled = hk .. ':rolled'
if redis.call('EXISTS', rolled) == 0 then
  local newest = redis.call('XREVRANGE', hk, '+', '-', 'COUNT', 1)[1]
  redis.call('SET', rolled, newest and newest[1] or '0-0')
end
local i = 5
while i <= #ARGV do
  local name, state, queue, id
  local tid  -- the task id, for the task index
  local finished  -- the record's finish time, ms: for the late index
  if ARGV[i] == 'c' then
    local meta = ARGV[i + 1]
    local a = string.find(meta, '\0', 1, true)
    local b = string.find(meta, '\0', a + 1, true)
    local c = string.find(meta, '\0', b + 1, true)
    name, state, queue = string.sub(meta, 1, a - 1), string.sub(meta, a + 1, b - 1), string.sub(meta, b + 1, c - 1)
    id = redis.call('XADD', hk, '*', 'm', meta, 'p', ARGV[i + 2])
    tid = task_of(ARGV[i + 2], PAYLOAD_ID, 'id')
    finished = tonumber(string.match(meta, '^%d+', c + 1))
    finished = finished and finished / 1000
    i = i + 3
  else
    name, state, queue = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    id = redis.call('XADD', hk, '*', 'r', ARGV[i + 4])
    tid = task_of(ARGV[i + 4], RECORD_ID, 'task_id')
    local at = string.find(ARGV[i + 4], '"finished_at":', 1, true)
    finished = at and tonumber(string.match(ARGV[i + 4], '^[^,}]+', at + 14))
    finished = finished and finished * 1000
    i = i + 5
  end
  -- no state index for SUCCESS (see the top)
  local idx = {hk .. ':q:' .. queue}
  if state ~= 'SUCCESS' then idx[2] = hk .. ':s:' .. state end
  if name ~= '' then idx[#idx + 1] = hk .. ':n:' .. name end
  if finished and tonumber(string.match(id, '^%d+')) - finished >= LATE_MS then
    idx[#idx + 1] = hk .. ':late'
  end
  for j = 1, #idx do
    -- pcall: an index holding a higher id (stream deleted, server clock set back) refuses
    -- this one; the record is kept anyway
    redis.pcall('XADD', idx[j], id, 'i', '')
    if not registered[idx[j]] then
      registered[idx[j]] = true
      redis.call('SADD', reg, idx[j])
    end
  end
  if tid and tid ~= '' then
    local ids = tids[tid]
    if ids then
      tids[tid] = ids .. ',' .. id
    else
      local k = #order + 1
      tids[tid], order[k], firsts[k] = id, tid, id
    end
  end
  n = n + 1
end
local first = 1
while first <= #order do
  if tlen >= tcap then  -- a new bucket, named by the first id it holds
    tkey, tlen = treg .. ':' .. firsts[first], 0
    redis.call('ZADD', treg, string.match(firsts[first], '^%d+'), tkey)
  end
  -- no more tasks than the bucket has room for (fewer if some are in it already)
  local last = math.min(#order, first + math.min(TASK_SLICE, tcap - tlen) - 1)
  local held = redis.call('HMGET', tkey, unpack(order, first, last))
  local set = {}
  for j = first, last do
    local tid, ids = order[j], held[j - first + 1]
    if ids then  -- a retry or another delivery of a task already in this bucket
      if #ids > 16384 then
        -- a task id sent again and again (task_id= is the caller's): keep its newest ~500
        -- here, so an append never copies more than 16 KiB
        ids = string.sub(ids, string.find(ids, ',', #ids - 8192, true) + 1)
      end
      ids = ids .. ',' .. tids[tid]
    else
      ids = tids[tid]
      tlen = tlen + 1
    end
    set[2 * (j - first) + 1] = tid
    set[2 * (j - first) + 2] = ids
  end
  redis.call('HSET', tkey, unpack(set))
  first = last + 1
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
  -- task buckets: of those started before the first record kept, all but the newest
  -- (which may still hold kept ones) point at trimmed records only (all when empty)
  local old = redis.call('ZRANGEBYSCORE', treg, '-inf', first and '(' .. string.match(first[1], '^%d+') or '+inf')
  for j = 1, #old - (first and 1 or 0) do
    redis.call('UNLINK', old[j])
    redis.call('ZREM', treg, old[j])
  end
end
if ARGV[3] == '1' then
  -- the exact trim drops the rollups (history_rollup_build.lua builds them) that start
  -- before the oldest entry kept, less two hours (ids are append times, and a record may be appended up to an hour after it
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
