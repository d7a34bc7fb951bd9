-- _cluster.lua: the helpers that differ under the cluster layout (redis+cluster://, see
-- potatoq/brokers/redis/cluster.py). The loader builds every script a second time for the
-- cluster, with each helper defined here replacing the _lib.lua helper of the same name
-- (in _lib.lua's order), so the transition scripts themselves are unchanged.
--
-- Under the cluster layout P is one queue's prefix, '{<prefix>:q:<queue>}:', so every key a
-- script builds from P hashes to that queue's slot. What belongs to another slot (results,
-- chord counters, follow-ups in other queues) is written into the outbox instead, in this
-- slot and in the same script, and relayed by cluster.py's relay:
--   P..'outbox'            ZSET  entry name -> written at (ms): what is waiting for a relay
--   P..'outbox:'..name     LIST  the entry's operations, one after the other:
--       'r', id, record, ttl_ms, stamp_ms        write a result (stamp: newer wins)
--       'c', group, index, size, value, ttl_ms, callback id, queue, priority, due, payload
--                                                join a chord (callback id '' = none)
--       'e', id, queue, priority, due_ms, payload    enqueue a message (once per entry)
-- An entry is named '<task id>:<fencing token>' by a settle (fenced() notes the token), or
-- '<task id>:r' for a reap's dead letter.

local outbox = {}

local function outbox_push(id, ...)
  if not outbox.key then
    outbox.name = id .. ':' .. (outbox.token or 'r')
    outbox.key = P .. 'outbox:' .. outbox.name
    redis.call('DEL', outbox.key)
    redis.call('ZADD', P .. 'outbox', now_ms(), outbox.name)
  end
  redis.call('RPUSH', outbox.key, ...)
end

-- As in _lib.lua, noting the token: it names the outbox entry of this settle.
local function fenced(id, token)
  local job = redis.call('HMGET', k_job(id), 'token', 'state', 'queue', 'payload', 'priority',
    'seq', 'deliveries', 'node', 'pid')
  if job[1] ~= token or job[2] ~= 'active' then return nil end
  outbox.token = token
  return {queue = job[3], payload = job[4], priority = job[5], seq = job[6],
          deliveries = tonumber(job[7]) or 0, node = job[8], pid = job[9]}
end

local function fenced_holder(id, token)
  local job = redis.call('HMGET', k_job(id), 'token', 'state', 'queue', 'node', 'pid')
  if job[1] ~= token or job[2] ~= 'active' then return nil end
  outbox.token = token
  return {queue = job[3], node = job[4], pid = job[5]}
end

-- The result lives in its own slot: through the outbox. A reap writes one per task.
local function write_result(id, record, ttl_ms)
  if record == '' then return end
  if not outbox.token then outbox.key = nil end  -- a reap: one entry per task
  outbox_push(id, 'r', id, record, ttl_ms, now_ms())
end

local function settle_tail(id, pos, now)
  write_result(id, ARGV[pos], ARGV[pos + 1])
  if ARGV[pos + 2] ~= '' then
    outbox_push(id, 'c', ARGV[pos + 2], ARGV[pos + 3], ARGV[pos + 4], ARGV[pos + 5], ARGV[pos + 1],
      ARGV[pos + 6], ARGV[pos + 7], ARGV[pos + 8], ARGV[pos + 9], ARGV[pos + 10])
  end
  local p = pos + 12
  for _ = 1, tonumber(ARGV[pos + 11]) do
    outbox_push(id, 'e', ARGV[p], ARGV[p + 1], ARGV[p + 2], ARGV[p + 3], ARGV[p + 4])
    p = p + 5
  end
  return p
end

-- retry: as in _lib.lua; a retry into another queue goes through the outbox.
local function settle_retry(pos, now)
  local id, token = ARGV[pos], ARGV[pos + 1]
  local job = fenced(id, token)
  local nextpos = pos + 8
  if not job then return 0, nextpos end
  remove_running(id, job.queue, job.node, job.pid)
  if ARGV[pos + 4] == job.queue then
    enqueue_many({{id, ARGV[pos + 4], ARGV[pos + 5], ARGV[pos + 6], ARGV[pos + 7]}}, now)
  else
    outbox_push(id, 'e', id, ARGV[pos + 4], ARGV[pos + 5], ARGV[pos + 6], ARGV[pos + 7])
  end
  write_result(id, ARGV[pos + 2], ARGV[pos + 3])
  return 1, nextpos
end

-- Limits and unique keys span queues, so on a cluster they live in slots of their own
-- ('{<prefix>:k:<key>}' for a limit, '{<prefix>:u:<key>}' for a unique key) and are taken
-- around these scripts by cluster_limits.py / cluster_unique.py. The queue slot's scripts
-- read none of the headers: these three replace _lib.lua's (the standalone build keeps
-- its in-slot counters), so claim never parks, enqueue never checks a key.
local function limit_of(jk, job)
  return nil, nil
end

local function rate_of(jk, job)
  return nil, nil, nil
end

local function unique_of(payload)
  return nil
end

-- A task leaves the queue (settle, revoke, purge, a reap's dead letter): its unique key,
-- held in the key's own slot, is released by cluster_unique.py, which pops these
-- '<id>, <key>' pairs from P..'uqfree' (LIST) right after the call, or in a recovery round.
-- A retry in the same queue writes the job again in this same script: its key is kept (the
-- relay releases only keys whose task is gone from the queue).
local function unique_release(id)
  local payload = redis.call('HGET', k_job(id), 'payload')
  if not payload or not string.find(payload, '"uq":[', 1, true) then return end
  local ok, body = pcall(cjson.decode, payload)
  local uq = ok and type(body) == 'table' and type(body.h) == 'table' and body.h.uq
  if type(uq) == 'table' and type(uq[1]) == 'string' then
    redis.call('RPUSH', P .. 'uqfree', id, uq[1])
  end
end
