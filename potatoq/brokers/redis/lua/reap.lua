-- reap: recover expired leases in every queue: back to ready (keeping their place), or,
-- once they were delivered max_deliveries times, dead-lettered as WorkerLostError with a
-- FAILURE result; or, when the caller settles those itself (so that their chords join and
-- their errbacks run, as a failure settle does), leased to the caller and returned.
-- Safe to run from many supervisors at once.
-- KEYS: none (queues, q:<queue>:active/ready/marker, job:<id>, dead*, result:<id>)
-- ARGV: [1] prefix, [2] max deliveries, [3] FAILURE result template with the task id
--       written as "@@PQ_ID@@" ('' = no result), [4] result ttl ms, [5] dead_letter_max,
--       [6] dead_letter_ttl ms, [7] reason, [8] most leases to reap in this call,
--       [9] hand-off token prefix ('' = dead-letter here), [10] lease ms of a handed-off task
-- Returns: {requeued, dead, handed-off...}: each handed-off task as claim returns it,
--          {id, queue, payload, deliveries, token, claimed_ms}, for the caller to settle
--          (if it doesn't, its lease runs out and the next reap hands it off again).
local now = now_ms()
local max_deliveries, template, ttl = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local budget = tonumber(ARGV[8])
local requeued, dead = 0, 0
local handoff, handed = ARGV[9], {}
local function fill(id)
  local a, b = string.find(template, '"@@PQ_ID@@"', 1, true)
  if not a then return template end
  return string.sub(template, 1, a - 1) .. cjson.encode(id) .. string.sub(template, b + 1)
end
local queues = redis.call('SMEMBERS', P .. 'queues')
for qi = 1, #queues do
  local q = queues[qi]
  local expired = redis.call('ZRANGEBYSCORE', k_active(q), '-inf', now, 'LIMIT', 0, budget)
  for i = 1, #expired do
    local id = expired[i]
    local jk = k_job(id)
    local job = redis.call('HMGET', jk, 'payload', 'deliveries', 'priority', 'seq', 'state', 'node', 'pid')
    if not job[1] or job[5] ~= 'active' then
      redis.call('ZREM', k_active(q), id)
    elseif tonumber(job[2]) >= max_deliveries and handoff ~= '' then
      local token = handoff .. ':' .. (#handed + 1)
      -- Still running (its slot held): the caller's settle ends the run and frees the slot.
      forget_holder(id, job[6], job[7])
      redis.call('HDEL', jk, 'node', 'pid')
      redis.call('HSET', jk, 'token', token, 'claimed', now)
      redis.call('ZADD', k_active(q), now + tonumber(ARGV[10]), id)
      handed[#handed + 1] = {id, q, job[1], tonumber(job[2]), token, now}
    elseif tonumber(job[2]) >= max_deliveries then
      remove_running(id, q, job[6], job[7])
      add_dead(id, q, job[1], ARGV[7], tonumber(job[2]), job[3], now, tonumber(ARGV[5]),
        tonumber(ARGV[6]))
      write_result(id, template ~= '' and fill(id) or '', ttl)
      dead = dead + 1
    else
      redis.call('ZREM', k_active(q), id)
      release(id, job[6], job[7])
      redis.call('HDEL', jk, 'token', 'node', 'pid', 'claimed')
      make_ready(id, q, job[3], job[4], now)
      arm(q)
      requeued = requeued + 1
    end
  end
  budget = budget - #expired
  if budget <= 0 then break end
end
table.insert(handed, 1, dead)
table.insert(handed, 1, requeued)
return handed
