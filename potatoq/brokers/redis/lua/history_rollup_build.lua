-- history_rollup_build: the charts' per-minute and per-hour rollups (history_rollup.py),
-- built in bulk from the history stream instead of on each settle (issue 31: grouping a
-- batch cost the worker as much Python as the HINCRBYs cost the server).
-- KEYS: none (history, history:rolled, history:minutes, history:m<span>:<minute>:<name>:
--       the history stream's slot on a cluster)
-- ARGV: [1] prefix, [2] how many entries to roll at most, [3] the rollups' TTL (seconds),
--       [4] the oldest finish time rolled up (epoch seconds: now less max_age; an older
--       record, appended late, is hidden already, and its rollups would outlive it)
-- 'history:rolled' holds the id of the last entry rolled up: this call reads the entries
-- after it (from the stream's first one when it was trimmed past it), adds each record to
-- its finish minute's and hour's rollups, of its name and of every task (''), one HINCRBY
-- per distinct field, and moves the cursor, in one script call: each record is counted
-- once, however many callers race. history_append.lua creates the cursor (at the newest
-- entry before its first record) when it is missing; when it is missing here the stream
-- holds only records an older version wrote, with their rollups: the cursor is set to its
-- newest entry and nothing is rolled (no double count after an upgrade).
-- Returns: {entries rolled, 1 if more remain else 0}.
local hk = ARGV[1] .. 'history'
local rolled = hk .. ':rolled'
local limit = tonumber(ARGV[2])
local ttl = ARGV[3]
local oldest = tonumber(ARGV[4])
local cursor = redis.call('GET', rolled)
if not cursor then
  local newest = redis.call('XREVRANGE', hk, '+', '-', 'COUNT', 1)[1]
  redis.call('SET', rolled, newest and newest[1] or '0-0')
  return {0, 0}
end
local entries = redis.call('XRANGE', hk, '(' .. cursor, '+', 'COUNT', limit + 1)
local n = math.min(limit, #entries)
if n == 0 then return {0, 0} end

-- The histogram bucket of a value (seconds), exactly as history_rollup.bucket_of: only
-- IEEE-exact operations (a division, frexp, comparisons with square roots), so the
-- server's Lua and the worker's Python agree to the last bit.
local BASE, TOP, WIDE = 1e-5, 160, 2 ^ 40
local Q2 = math.sqrt(2)
local Q1 = math.sqrt(Q2)
local Q3 = Q2 * Q1
local function bucket(v)
  if not (v >= BASE) then return 0 end
  local x = v / BASE
  if x >= WIDE then return TOP end
  local m, e = math.frexp(x)  -- x = m * 2^e, m in [0.5, 1)
  m = m * 2
  local q = (m < Q1 and 0) or (m < Q2 and 1) or (m < Q3 and 2) or 3
  return math.min(TOP, 4 * (e - 1) + q + 1)
end
local function minute_of(t)  -- floor(t / 60), as Python's t // 60
  local m = math.floor(t / 60)
  if m * 60 > t then m = m - 1 elseif (m + 1) * 60 <= t then m = m + 1 end
  return m
end
-- sums: whole microseconds (HINCRBY), rounded per sample: exact in any order
local COLUMN = {SUCCESS = 'success', FAILURE = 'failure', RETRY = 'retry', REVOKED = 'revoked', DEAD = 'dead'}
local RUN, LAT = {}, {}  -- a bucket's field names, made once
for b = 0, TOP do RUN[b], LAT[b] = 'r' .. b, 'l' .. b end

-- name -> minute -> its fields' increments; merged into hours and every task's below
-- (nested tables: no key string made per record)
local groups = {}
local lo, hi, minute = 0, -1, nil  -- the last record's minute [lo, hi): most share one
local function sample(name, state, finished, runtime, latency)
  if finished < oldest then return end
  if not (finished >= lo and finished < hi) then
    minute = minute_of(finished)
    lo, hi = minute * 60, minute * 60 + 60
  end
  local by_minute = groups[name]
  if not by_minute then
    by_minute = {}
    groups[name] = by_minute
  end
  local f = by_minute[minute]
  if not f then
    f = {}
    by_minute[minute] = f
  end
  local column = COLUMN[state]
  if column then f[column] = (f[column] or 0) + 1 end
  if runtime then
    local b = RUN[bucket(runtime)]
    f.run_n = (f.run_n or 0) + 1
    f.run_sum = (f.run_sum or 0) + math.floor(runtime * 1e6 + 0.5)  -- whole µs, per sample
    f[b] = (f[b] or 0) + 1
  end
  if latency then
    local b = LAT[bucket(latency)]
    f.lat_n = (f.lat_n or 0) + 1
    f.lat_sum = (f.lat_sum or 0) + math.floor(latency * 1e6 + 0.5)
    f[b] = (f[b] or 0) + 1
  end
end

-- history_compact.py's meta: name, state, queue, finished (µs), started (µs), deliveries,
-- worker, pid, latency (µs, '' for none), extra; entries older than the latency field
-- have one field fewer (and no latency)
local META = '^([^%z]*)%z([^%z]*)%z[^%z]*%z(%d+)%z(%d+)%z[^%z]*%z[^%z]*%z[^%z]*%z'
local META_LATENCY = META .. '(%d*)%z'
for k = 1, n do
  local fields = entries[k][2]
  local meta, full
  if fields[1] == 'm' then
    meta = fields[2]
  else
    for j = 1, #fields, 2 do
      if fields[j] == 'm' then meta = fields[j + 1] elseif fields[j] == 'r' then full = fields[j + 1] end
    end
  end
  if meta then
    local name, state, finished, started, latency = string.match(meta, META_LATENCY)
    if not name then
      name, state, finished, started = string.match(meta, META)
    end
    if name then
      latency = latency and tonumber(latency)
      finished = tonumber(finished) / 1e6
      sample(name, state, finished, math.max(0, finished - tonumber(started) / 1e6), latency and latency / 1e6)
    end
  elseif full then
    -- a full record (JSON): history_rollup.sample_of
    local ok, r = pcall(cjson.decode, full)
    if ok and type(r) == 'table' and type(r.finished_at) == 'number' then
      local started = type(r.started_at) == 'number' and r.started_at or nil
      local runtime = started and type(r.runtime) == 'number' and r.runtime or nil
      local latency
      if started and type(r.enqueued_at) == 'number' then
        local due = type(r.due_at) == 'number' and r.due_at or 0
        latency = math.max(0, started - math.max(r.enqueued_at, due))
      end
      sample(type(r.name) == 'string' and r.name or '', type(r.state) == 'string' and r.state or '',
        r.finished_at, runtime, latency)
    end
  end
end

-- each (name, minute) into its hour, and (named ones) into every task's minute and hour
local out, outs = {}, {}
local function into(span, minute, name, f)
  local rkey = hk .. ':m' .. span .. ':' .. string.format('%d', minute) .. ':' .. name
  local t = out[rkey]
  if not t then
    t = {}
    out[rkey] = t
    outs[#outs + 1] = {rkey, minute}
  end
  for field, k in pairs(f) do t[field] = (t[field] or 0) + k end
end
for name, by_minute in pairs(groups) do
  for minute, f in pairs(by_minute) do
    local hour = minute - minute % 60
    into(1, minute, name, f)
    into(60, hour, name, f)
    if name ~= '' then
      into(1, minute, '', f)
      into(60, hour, '', f)
    end
  end
end
local minutes = hk .. ':minutes'
for _, o in ipairs(outs) do
  local rkey = o[1]
  for field, k in pairs(out[rkey]) do
    redis.call('HINCRBY', rkey, field, string.format('%d', k))
  end
  redis.call('EXPIRE', rkey, ttl)
  redis.call('ZADD', minutes, string.format('%d', o[2]), rkey)
end
if #outs > 0 then redis.call('EXPIRE', minutes, ttl) end
redis.call('SET', rolled, entries[n][1])
return {n, #entries > n and 1 or 0}
