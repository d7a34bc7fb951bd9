-- _lib.lua: helpers shared by every potatoq script. The loader (potatoq/brokers/redis/scripts.py,
-- _load_scripts) prepends this header and the helpers each transition script uses to
-- it, so each script stays one EVALSHA call. A script defines its helper closures again
-- on every call, so it carries only those it needs: each top-level `local` statement
-- (with the comment lines right above it) is one helper, included when the body or an
-- included helper names it. Keep helpers at column 0, one `local` statement each.
--
-- Key layout (the Python side documents the same layout in potatoq/brokers/redis/__init__.py;
-- P is ARGV[1], the global_keyprefix followed by ":"):
--   P..'q:'..queue..':ready'    ZSET  id -> -priority*2^40 + seq (real priorities, FIFO within one)
--   P..'q:'..queue..':delayed'  ZSET  id -> due time (ms, server clock)
--   P..'q:'..queue..':active'   ZSET  id -> lease deadline (ms, server clock)
--   P..'q:'..queue..':marker'   ZSET  one member; idle workers BZPOPMIN it
--   P..'q:'..queue..':timer'    STRING '<due ms> <waiter>': the waiter timing the next due task
--   P..'held:'..node..':'..pid  SET   ids that worker process holds (its supervisor asks: held_by)
--   P..'job:'..id               HASH  payload queue priority seq state deliveries token
--                                     node pid claimed ready_at due
--   P..'result:'..id            STRING encoded ResultRecord, PX result_expires
--   P..'waiting:'..id           STRING number of .get() callers waiting (with expiry)
--   P..'notify:'..id            LIST  one element per waiter, pushed when a result is written
--   P..'dead'                   ZSET  id -> died at ms * 1000 + counter; P..'dead:payload', P..'dead:info' HASHes
--   P..'chord:'..group          HASH  'p:<index>' -> part value, 'n' parts seen, 'fired'
--   P..'periodic:'..name..':'..ts  STRING, SET NX: one sender per fire time
--   P..'periodic:last'          HASH  name -> newest fire time sent (ms)
--   P..'workers' HASH node -> WorkerInfo; P..'workers:seen' ZSET node -> last heartbeat (ms)
--   P..'queues'  SET of queue names (stats, recovery); P..'seq' the ready sequence counter (< 2^40)
--   P..'limits:running'  HASH  concurrency limit key -> slots in use (running tasks of that key)
--   P..'limits:override' HASH  key -> limit set at run time (else the job's 'lm' applies)
--   P..'limits:carried'  HASH  key -> the max its last claimed task carried (for listing)
--   P..'limit:'..key..':parked'  ZSET  id -> ready score: ready tasks waiting for a slot;
--   P..'limits:parked'   SET   keys with a parked set
--   (a job hash also holds 'lk' and 'lm', its limit key and max, read from its payload)
--   P..'rates:tat'       HASH  rate limit key -> GCRA theoretical arrival time (ms)
--   P..'rates:defer'     HASH  key -> where the next task moved to wait for a token goes (ms)
--   P..'rates:carried'   HASH  key -> '<ms per token> <burst>' its last claimed task carried
--   P..'rates:override'  HASH  key -> '<ms per token> <burst>' set at run time
--   P..'rate:'..key..':waiting'  SET  ids moved to their queue's delayed set for a token
--   P..'rates:waiting'   SET   keys with a waiting set
--   (a job hash also holds 'rk', 'ri', 'rb': its rate key, ms per token and burst, and
--   'rw' while it waits for a token)
--   P..'history'  STREAM task-history records; P..'history:n:'..name, ':s:'..state (not
--                 SUCCESS), ':q:'..queue STREAM indexes (entry ids = history ids);
--                 P..'history:indexes' SET of index keys
--
-- Time: every script reads the server clock (TIME), so leases, due times and heartbeats
-- are judged by one clock however skewed the workers' clocks are.

local P = ARGV[1]
local PRIO_SHIFT = 1099511627776  -- 2^40: seq stays below it, priority above it
local PRIO_MAX = 8190             -- |priority| * 2^40 + seq must stay exact in a double
local MARK = 'm'

local function k_ready(q) return P .. 'q:' .. q .. ':ready' end
local function k_delayed(q) return P .. 'q:' .. q .. ':delayed' end
local function k_active(q) return P .. 'q:' .. q .. ':active' end
local function k_marker(q) return P .. 'q:' .. q .. ':marker' end
local function k_job(id) return P .. 'job:' .. id end
local function k_result(id) return P .. 'result:' .. id end
local function k_waiting(id) return P .. 'waiting:' .. id end
local function k_notify(id) return P .. 'notify:' .. id end
local function k_held(node, pid) return P .. 'held:' .. node .. ':' .. pid end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function clamp_priority(p)
  p = math.floor(tonumber(p) or 0)
  if p > PRIO_MAX then return PRIO_MAX end
  if p < -PRIO_MAX then return -PRIO_MAX end
  return p
end

local function ready_score(priority, seq)
  return -clamp_priority(priority) * PRIO_SHIFT + seq
end

-- Wake one idle worker of queue q (a persistent marker: a wake-up can't be lost).
local function arm(q)
  redis.call('ZADD', P .. 'q:' .. q .. ':marker', 0, MARK)
end

-- Renumber every waiting task 1..n in its current order (one global count keeps each
-- queue's order) and restart the counter after them; running tasks forget their kept
-- place (a requeue puts them at the back). Called once per 2^40 sequence numbers: it
-- blocks the server for one pass over the ready sets.
local function renumber_ready()
  local n = 0
  local queues = redis.call('SMEMBERS', P .. 'queues')
  for qi = 1, #queues do
    local q = queues[qi]
    local rk = k_ready(q)
    local ids = redis.call('ZRANGE', rk, 0, -1)
    for i = 1, #ids do
      local jk = k_job(ids[i])
      local priority = redis.call('HGET', jk, 'priority')
      if priority then
        n = n + 1
        redis.call('HSET', jk, 'seq', n)
        redis.call('ZADD', rk, ready_score(priority, n), ids[i])
      else  -- its hash is gone (evicted, deleted by hand): claim would skip it anyway
        redis.call('ZREM', rk, ids[i])
      end
    end
    local running = redis.call('ZRANGE', k_active(q), 0, -1)
    for i = 1, #running do redis.call('HDEL', k_job(running[i]), 'seq') end
  end
  n = n + 1
  redis.call('SET', P .. 'seq', n)
  return n
end

-- The next ready sequence number. It must stay below 2^40, or a band's tasks would sort
-- among the next priority's: at the limit the waiting tasks are renumbered from 1.
local SEQ_LIMIT = PRIO_SHIFT - 1
local function next_seq()
  local seq = redis.call('INCR', P .. 'seq')
  if seq < SEQ_LIMIT then return seq end
  return renumber_ready()
end

-- Put job id (hash already written) into q's ready set, keeping seq when it has one.
local function make_ready(id, q, priority, seq, now)
  if not seq then
    seq = next_seq()
    redis.call('HSET', k_job(id), 'seq', seq)
  end
  redis.call('HSET', k_job(id), 'state', 'ready', 'ready_at', now)
  redis.call('ZADD', k_ready(q), ready_score(priority, tonumber(seq)), id)
end

-- Concurrency limits (potatoq/brokers/limits.py). The limit key and max of job `jk`: read
-- from the hash, or on first use from the payload's "cl" header (a plain byte search
-- first, so unlimited tasks are never decoded). job = HMGET payload, state, deliveries, lk, lm.
local function limit_of(jk, job)
  if job[4] then return job[4], tonumber(job[5]) end
  if not string.find(job[1], '"cl":[', 1, true) then return nil, nil end
  local ok, body = pcall(cjson.decode, job[1])
  local cl = ok and type(body) == 'table' and type(body.h) == 'table' and body.h.cl
  if type(cl) ~= 'table' or type(cl[1]) ~= 'string' or type(cl[2]) ~= 'number' then return nil, nil end
  redis.call('HSET', jk, 'lk', cl[1], 'lm', cl[2])
  return cl[1], cl[2]
end

-- The limit of key lk now: the run-time override, else the max its task carries.
local function limit_max(lk, carried)
  return tonumber(redis.call('HGET', P .. 'limits:override', lk)) or carried
end

-- Take one slot of key lk if one is free; true if taken.
local function take_slot(lk, carried)
  local running = tonumber(redis.call('HGET', P .. 'limits:running', lk)) or 0
  if running >= limit_max(lk, carried) then
    redis.call('SADD', P .. 'limits:parked', lk)
    return false
  end
  redis.call('HINCRBY', P .. 'limits:running', lk, 1)
  redis.call('HSET', P .. 'limits:carried', lk, carried)
  return true
end

-- Move up to n tasks waiting on key lk back to their queue's ready set, in their old place,
-- and wake a worker of each queue (no polling: the slot's release is the wake-up).
local function unpark(lk, n)
  local pk = P .. 'limit:' .. lk .. ':parked'
  while n > 0 do
    local popped = redis.call('ZPOPMIN', pk)
    if #popped == 0 then
      redis.call('SREM', P .. 'limits:parked', lk)
      return
    end
    local job = redis.call('HMGET', k_job(popped[1]), 'queue', 'state')
    if job[1] and job[2] == 'ready' then  -- a revoked task's hash is gone: skipped
      redis.call('ZADD', k_ready(job[1]), popped[2], popped[1])
      arm(job[1])
      n = n - 1
    end
  end
end

-- The run of job `id` ended (settle, requeue, reap): give its slot back, wake one waiter.
local function free_slot(id)
  local lk = redis.call('HGET', k_job(id), 'lk')
  if not lk then return end
  if redis.call('HINCRBY', P .. 'limits:running', lk, -1) <= 0 then
    redis.call('HDEL', P .. 'limits:running', lk)
  end
  unpark(lk, 1)
end

-- A time or duration in ms as an argument for the server (which takes no Lua floats).
local function ms_text(x)
  return string.format('%.3f', x)
end

-- Global rate limits (potatoq/brokers/limits.py): GCRA per key. The rate key, ms per
-- token and burst of job `jk`: from the hash, or on first use from the payload's "rl"
-- header (a plain byte search first). job = HMGET payload, state, deliveries, lk, lm, rk, ri, rb.
local function rate_of(jk, job)
  if job[6] then return job[6], tonumber(job[7]), tonumber(job[8]) end
  if not string.find(job[1], '"rl":[', 1, true) then return nil, nil, nil end
  local ok, body = pcall(cjson.decode, job[1])
  local rl = ok and type(body) == 'table' and type(body.h) == 'table' and body.h.rl
  if type(rl) ~= 'table' or type(rl[1]) ~= 'string' or type(rl[2]) ~= 'number' or rl[2] <= 0
     or type(rl[3]) ~= 'number' then
    return nil, nil, nil
  end
  local ri = 1000 / rl[2]
  redis.call('HSET', jk, 'rk', rl[1], 'ri', ms_text(ri), 'rb', rl[3])
  return rl[1], ri, rl[3]
end

-- Key rk's next token (ms: a claim at `now` may take one when it is <= now), its tat, and
-- the ms per token and burst in force: the run-time override, else the task's.
local function rate_next(rk, ri, rb)
  local o = redis.call('HGET', P .. 'rates:override', rk)
  if o then
    local oi, ob = string.match(o, '^(%S+) (%S+)$')
    ri, rb = tonumber(oi), tonumber(ob)
  end
  local tat = tonumber(redis.call('HGET', P .. 'rates:tat', rk)) or 0
  return tat - (rb - 1) * ri, tat, ri
end

-- The claimed job takes a token of key rk (the claim checked rate_next first).
local function take_token(id, rk, ri, rb, waited, now)
  local _, tat, step = rate_next(rk, ri, rb)
  redis.call('HSET', P .. 'rates:tat', rk, ms_text(math.max(tat, now) + step))
  redis.call('HSET', P .. 'rates:carried', rk, ms_text(ri) .. ' ' .. rb)
  if waited then
    redis.call('HDEL', k_job(id), 'rw')
    redis.call('SREM', P .. 'rate:' .. rk .. ':waiting', id)
  end
end

-- Job id of queue q has no token of key rk now: it moves to q's delayed set at the time
-- its token is expected, one token after the last task moved (no delivery is counted),
-- and the queue's waiters are woken when it is now the first due (as enqueue_one does).
-- A job that waited already (`waited`) and came back a little before its token (the claim
-- before it was late) takes the next token rather than going to the back of the line.
local function rate_wait(id, q, rk, next_at, step, waited)
  local defer = tonumber(redis.call('HGET', P .. 'rates:defer', rk)) or 0
  local at = waited and next_at or math.max(next_at, defer)
  redis.call('HSET', P .. 'rates:defer', rk, ms_text(math.max(defer, at + step)))
  redis.call('HSET', k_job(id), 'state', 'delayed', 'due', ms_text(at), 'rw', 1)
  redis.call('ZADD', k_delayed(q), ms_text(at), id)
  redis.call('SADD', P .. 'rate:' .. rk .. ':waiting', id)
  redis.call('SADD', P .. 'rates:waiting', rk)
  if redis.call('ZRANGE', k_delayed(q), 0, 0)[1] == id then arm(q) end
end

-- Unique tasks (potatoq/brokers/unique.py). uq:<key> holds the id of the task holding
-- the key (PX unique_for when given: the backstop); the key counts as held only while that
-- task's hash exists and, for a key released at start (uqr = 0), isn't running. Removing
-- the task (settle, dead-letter, revoke, purge) deletes uq:<key> in the same script.
local function k_unique(key) return P .. 'uq:' .. key end

-- The "uq" header [key, seconds, running] of a payload (a byte search first, so the
-- payloads of plain tasks are never decoded), or nil.
local function unique_of(payload)
  if not string.find(payload, '"uq":[', 1, true) then return nil end
  local ok, body = pcall(cjson.decode, payload)
  local uq = ok and type(body) == 'table' and type(body.h) == 'table' and body.h.uq
  if type(uq) ~= 'table' or type(uq[1]) ~= 'string' then return nil end
  return uq
end

-- The id holding unique key `key`, or nil when it is free.
local function unique_holder(key)
  local holder = redis.call('GET', k_unique(key))
  if not holder then return nil end
  local job = redis.call('HMGET', k_job(holder), 'state', 'uqr')
  if not job[1] or (job[1] == 'active' and job[2] == '0') then return nil end
  return holder
end

-- Task `id` leaves the broker: release the unique key it holds (before its hash goes).
local function unique_release(id)
  local key = redis.call('HGET', k_job(id), 'uq')
  if key and redis.call('GET', k_unique(key)) == id then redis.call('DEL', k_unique(key)) end
end

-- Store one message. m = {id, queue, priority, due_ms or '', payload}. Returns 1 if
-- stored, 0 if a task with this id is already waiting or running (a no-op), or the id of
-- the task holding the message's unique key (not stored either).
local function enqueue_one(m, now, armed)
  local id, q, priority, due, payload = m[1], m[2], m[3], tonumber(m[4]), m[5]
  local jk = k_job(id)
  if redis.call('EXISTS', jk) == 1 then return 0 end
  local uq = unique_of(payload)
  if uq then
    local holder = unique_holder(uq[1])
    if holder then return holder end
    if type(uq[2]) == 'number' then
      redis.call('SET', k_unique(uq[1]), id, 'PX', math.max(1, math.ceil(uq[2] * 1000)))
    else
      redis.call('SET', k_unique(uq[1]), id)
    end
    redis.call('HSET', jk, 'uq', uq[1], 'uqr', uq[3] == 0 and '0' or '1')
  end
  redis.call('SADD', P .. 'queues', q)
  if due and due > now then
    redis.call('HSET', jk, 'payload', payload, 'queue', q, 'priority', priority, 'deliveries', 0,
      'state', 'delayed', 'due', due)
    redis.call('ZADD', k_delayed(q), due, id)
    -- Waiters bound their block by the earliest due time: wake one only when this task
    -- became the earliest, so that it can shorten its timeout.
    if not armed[q] and redis.call('ZRANGE', k_delayed(q), 0, 0)[1] == id then
      arm(q)
      armed[q] = true
    end
  else
    local seq = next_seq()
    redis.call('HSET', jk, 'payload', payload, 'queue', q, 'priority', priority, 'deliveries', 0,
      'state', 'ready', 'seq', seq, 'ready_at', now)
    redis.call('ZADD', k_ready(q), ready_score(priority, seq), id)
    if not armed[q] then
      arm(q)
      armed[q] = true
    end
  end
  return 1
end

-- Read `count` messages of 5 fields each from ARGV starting at pos; return list, next pos.
local function read_messages(pos, count)
  local list = {}
  for i = 1, count do
    list[i] = {ARGV[pos], ARGV[pos + 1], ARGV[pos + 2], ARGV[pos + 3], ARGV[pos + 4]}
    pos = pos + 5
  end
  return list, pos
end

-- Store messages; returns how many were stored and {index, holder id, ...} for the
-- unique ones whose key was held.
local function enqueue_many(list, now)
  local armed, n, dups = {}, 0, {}
  for i = 1, #list do
    local stored = enqueue_one(list[i], now, armed)
    if stored == 1 then
      n = n + 1
    elseif stored ~= 0 then
      dups[#dups + 1] = i
      dups[#dups + 1] = stored
    end
  end
  return n, dups
end

-- Move due delayed tasks of q to ready (inside claim: no poller, no pop-then-push gap).
local PROMOTE_BATCH = 1000
local function promote(q, now)
  local due = redis.call('ZRANGEBYSCORE', k_delayed(q), '-inf', now, 'LIMIT', 0, PROMOTE_BATCH)
  for i = 1, #due do
    local id = due[i]
    redis.call('ZREM', k_delayed(q), id)
    local prio = redis.call('HGET', k_job(id), 'priority')
    if prio then make_ready(id, q, prio, nil, now) end
  end
  return #due
end

-- Claim the best ready task of the first queue in `queues` that has one.
-- Returns {id, queue, payload, deliveries, token, claimed_ms} or nil.
-- `chain`: re-arm the queue's marker while work remains. A claim made after a wait
-- passes it: that worker popped the marker, so it hands the wake-up on to the next idle
-- one. A busy worker's claim (settle_and_claim) popped nothing and leaves the marker as it
-- is: one call less per task, and ZCARD's too (it still arms after promoting tasks, which
-- nobody was woken for).
local function claim(queues, token, lease_ms, node, pid, now, chain)
  for qi = 1, #queues do
    local q = queues[qi]
    local promoted = promote(q, now)
    local rk = k_ready(q)
    while true do
      local popped = redis.call('ZPOPMIN', rk)
      if #popped == 0 then break end
      local id = popped[1]
      local jk = k_job(id)
      local job = redis.call('HMGET', jk, 'payload', 'state', 'deliveries', 'lk', 'lm', 'rk', 'ri', 'rb', 'rw')
      local lk, lm, rate_key, ri, rb, next_at, tat, step
      if job[1] and job[2] == 'ready' then
        lk, lm = limit_of(jk, job)
        rate_key, ri, rb = rate_of(jk, job)
        if rate_key then next_at, tat, step = rate_next(rate_key, ri, rb) end
      end
      -- A task whose rate key has no token now waits in its queue's delayed set until
      -- the token is due, so it holds back no other task.
      if rate_key and next_at > now then
        rate_wait(id, q, rate_key, next_at, step, job[9])
      -- A task whose key has every slot running waits in its key's parked set (keeping
      -- its score), so it holds back no other task; free_slot moves it back.
      elseif lk and not take_slot(lk, lm) then
        redis.call('ZADD', P .. 'limit:' .. lk .. ':parked', popped[2], id)
      -- A missing hash (revoked, or evicted by a misconfigured server) is skipped.
      elseif job[1] and job[2] == 'ready' then
        if rate_key then take_token(id, rate_key, ri, rb, job[9], now) end
        -- One HSET with the count read above (one call less than HINCRBY + HSET).
        local deliveries = (tonumber(job[3]) or 0) + 1
        redis.call('HSET', jk, 'state', 'active', 'deliveries', deliveries, 'token', token,
          'node', node, 'pid', pid, 'claimed', now)
        redis.call('ZADD', k_active(q), now + lease_ms, id)
        redis.call('SADD', k_held(node, pid), id)
        -- Re-arm while work remains, so wake-ups chain from worker to worker.
        if (chain or promoted > 0) and (promoted >= PROMOTE_BATCH or redis.call('ZCARD', rk) > 0) then
          arm(q)
        end
        return {id, q, job[1], deliveries, token, now}
      end
    end
  end
  return nil
end

-- The running job `id` if `token` still holds its claim, else nil (a stale delivery).
local function fenced(id, token)
  local job = redis.call('HMGET', k_job(id), 'token', 'state', 'queue', 'payload', 'priority',
    'seq', 'deliveries', 'node', 'pid')
  if job[1] ~= token or job[2] ~= 'active' then return nil end
  return {queue = job[3], payload = job[4], priority = job[5], seq = job[6],
          deliveries = tonumber(job[7]) or 0, node = job[8], pid = job[9]}
end

-- Who holds the running job `id` if `token` still holds its claim, else nil: the fields
-- a complete needs (fenced() also reads the payload, which can be large, for the others).
local function fenced_holder(id, token)
  local job = redis.call('HMGET', k_job(id), 'token', 'state', 'queue', 'node', 'pid')
  if job[1] ~= token or job[2] ~= 'active' then return nil end
  return {queue = job[3], node = job[4], pid = job[5]}
end

-- Wake every .get() caller waiting on id; costs one EXISTS-like read when nobody waits.
local function notify(id)
  local waiters = tonumber(redis.call('GET', k_waiting(id)))
  if waiters and waiters > 0 then
    local nk = k_notify(id)
    for _ = 1, waiters do redis.call('RPUSH', nk, '1') end
    redis.call('PEXPIRE', nk, 60000)
  end
end

local function write_result(id, record, ttl_ms)
  if record == '' then return end
  redis.call('SET', k_result(id), record, 'PX', ttl_ms)
  notify(id)
end

-- Record chord part; returns 1 when this join completed the chord (exactly once).
local function chord_join(group, index, size, value, ttl_ms, callback, now)
  local ck = P .. 'chord:' .. group
  if redis.call('HSETNX', ck, 'p:' .. index, value) == 1 then
    redis.call('HINCRBY', ck, 'n', 1)
  end
  redis.call('PEXPIRE', ck, ttl_ms)
  local n = tonumber(redis.call('HGET', ck, 'n'))
  if n >= tonumber(size) and redis.call('HSETNX', ck, 'fired', '1') == 1 then
    if callback then enqueue_many({callback}, now) end
    return 1
  end
  return 0
end

-- Settle tail shared by complete and dead-letter, read from ARGV at pos:
--   result ('' = none), result_ttl_ms, chord_group ('' = none), chord_index, chord_size,
--   chord_value, callback (5 fields), n_followups, followups (5 fields each).
local function settle_tail(id, pos, now)
  write_result(id, ARGV[pos], ARGV[pos + 1])
  local group = ARGV[pos + 2]
  if group ~= '' then
    local cb = {ARGV[pos + 6], ARGV[pos + 7], ARGV[pos + 8], ARGV[pos + 9], ARGV[pos + 10]}
    chord_join(group, ARGV[pos + 3], ARGV[pos + 4], ARGV[pos + 5], ARGV[pos + 1], cb, now)
  end
  local count = tonumber(ARGV[pos + 11])
  if count == 0 then return pos + 12 end  -- the usual case: no tables to build
  local followups, nextpos = read_messages(pos + 12, count)
  enqueue_many(followups, now)
  return nextpos
end

local function settle_tail_skip(pos)
  return pos + 12 + 5 * tonumber(ARGV[pos + 11])
end

-- Forget that worker process (node, pid) holds id, the run going on (reap's hand-off: the
-- run keeps its concurrency slot until the caller settles it).
local function forget_holder(id, node, pid)
  if node and pid then redis.call('SREM', k_held(node, pid), id) end
end

-- Forget that worker process (node, pid) holds id (its claim ended).
-- Also gives back its concurrency slot, so every way a run ends frees it.
local function release(id, node, pid)
  forget_holder(id, node, pid)
  free_slot(id)
end

local function remove_running(id, q, node, pid)
  redis.call('ZREM', k_active(q), id)
  release(id, node, pid)
  unique_release(id)
  redis.call('DEL', k_job(id))
end

-- Add a dead letter, then trim the dead set by age and count (with its payloads).
-- The score is died-at ms * 1000 plus a counter, so letters that die in the same
-- millisecond still list newest first.
local function dead_score(ms)
  return ms * 1000 + redis.call('INCR', P .. 'seq') % 1000
end

local function add_dead(id, q, payload, reason, deliveries, priority, now, max_count, ttl_ms)
  local dk = P .. 'dead'
  redis.call('ZADD', dk, dead_score(now), id)
  redis.call('HSET', P .. 'dead:payload', id, payload)
  redis.call('HSET', P .. 'dead:info', id, cjson.encode({queue = q, reason = reason,
    deliveries = deliveries, priority = tonumber(priority) or 0, died = now}))
  local drop = redis.call('ZRANGEBYSCORE', dk, '-inf', '(' .. string.format('%.0f', (now - ttl_ms) * 1000))
  local excess = redis.call('ZCARD', dk) - #drop - max_count
  if excess > 0 then
    local oldest = redis.call('ZRANGE', dk, #drop, #drop + excess - 1)
    for i = 1, #oldest do drop[#drop + 1] = oldest[i] end
  end
  for i = 1, #drop do
    redis.call('ZREM', dk, drop[i])
    redis.call('HDEL', P .. 'dead:payload', drop[i])
    redis.call('HDEL', P .. 'dead:info', drop[i])
  end
end

-- Settle outcomes. Each reads its arguments from ARGV starting at pos and returns
-- (settled 0/1, next pos). A stale delivery changes nothing.

-- complete: id, token, <settle tail>
local function settle_complete(pos, now)
  local id, token = ARGV[pos], ARGV[pos + 1]
  local job = fenced_holder(id, token)
  if not job then return 0, settle_tail_skip(pos + 2) end
  remove_running(id, job.queue, job.node, job.pid)
  return 1, settle_tail(id, pos + 2, now)
end

-- dead: id, token, reason, dead_max, dead_ttl_ms, <settle tail>
local function settle_dead(pos, now)
  local id, token = ARGV[pos], ARGV[pos + 1]
  local job = fenced(id, token)
  if not job then return 0, settle_tail_skip(pos + 5) end
  remove_running(id, job.queue, job.node, job.pid)
  add_dead(id, job.queue, job.payload, ARGV[pos + 2], job.deliveries, job.priority, now,
    tonumber(ARGV[pos + 3]), tonumber(ARGV[pos + 4]))
  return 1, settle_tail(id, pos + 5, now)
end

-- retry: id, token, result ('' = none), result_ttl_ms, queue, priority, due_ms ('' = now), payload
local function settle_retry(pos, now)
  local id, token = ARGV[pos], ARGV[pos + 1]
  local job = fenced(id, token)
  local nextpos = pos + 8
  if not job then return 0, nextpos end
  remove_running(id, job.queue, job.node, job.pid)
  enqueue_many({{id, ARGV[pos + 4], ARGV[pos + 5], ARGV[pos + 6], ARGV[pos + 7]}}, now)
  write_result(id, ARGV[pos + 2], ARGV[pos + 3])
  return 1, nextpos
end

-- requeue: id, token, crashed ('1' counts this delivery, '0' doesn't)
local function settle_requeue(pos, now)
  local id, token = ARGV[pos], ARGV[pos + 1]
  local job = fenced(id, token)
  if not job then return 0, pos + 3 end
  local jk = k_job(id)
  redis.call('ZREM', k_active(job.queue), id)
  release(id, job.node, job.pid)
  if ARGV[pos + 2] ~= '1' then redis.call('HINCRBY', jk, 'deliveries', -1) end
  redis.call('HDEL', jk, 'token', 'node', 'pid', 'claimed')
  make_ready(id, job.queue, job.priority, job.seq, now)
  arm(job.queue)
  return 1, pos + 3
end

local SETTLE = {complete = settle_complete, dead = settle_dead, retry = settle_retry,
                requeue = settle_requeue}

-- Claim arguments from ARGV at pos: token, lease_ms, node, pid, n_queues, queues...
local function claim_from_argv(pos, now, chain)
  local nq = tonumber(ARGV[pos + 4])
  local queues = {}
  for i = 1, nq do queues[i] = ARGV[pos + 4 + i] end
  return claim(queues, ARGV[pos], tonumber(ARGV[pos + 1]), ARGV[pos + 2], ARGV[pos + 3], now, chain)
end
