-- cluster_limit_defer: a claimed task that got no concurrency slot or no rate token (its
-- limit's own slot said so: cluster_limits.py) goes back to its queue's delayed set until
-- `at`, as if it had never been claimed: its delivery count goes back down, it leaves
-- `active` and its worker's held set. It is listed in lwait:<kind>:<key> (this queue's slot)
-- so that a freed slot or a rate set at run time can make it due at once
-- (cluster_limit_wake.lua); 'rw' notes that it waited for a token (its next take keeps
-- its place in line: cluster_rate_take.lua).
-- KEYS: none (the queue's keys)
-- ARGV: [1] prefix, [2] id, [3] fencing token, [4] ms to wait, [5] 's' (slot) or 'r' (rate),
--       [6] limit key, [7] '1' if it waited for a rate token, else ''
-- Returns: 1 if moved, 0 if the delivery isn't this one any more (reaped meanwhile).
local id = ARGV[2]
local jk = k_job(id)
local job = redis.call('HMGET', jk, 'token', 'state', 'queue', 'node', 'pid', 'deliveries')
if job[1] ~= ARGV[3] or job[2] ~= 'active' then return 0 end
local wait_ms = tonumber(ARGV[4])
-- A task that waited for a slot already waits longer each time (up to 10 x), so a long
-- line behind a full limit costs few claims; a slot given back in its queue wakes one
-- at once whatever its wait (cluster_limit_wake.lua).
if ARGV[5] == 's' then wait_ms = wait_ms * math.min(10, redis.call('HINCRBY', jk, 'lwn', 1)) end
local now = now_ms()
local at = now + wait_ms
local q = job[3]
redis.call('ZREM', k_active(q), id)
forget_holder(id, job[4], job[5])
local wait = ARGV[5] .. ':' .. ARGV[6]
local deliveries = math.max(0, (tonumber(job[6]) or 1) - 1)
redis.call('HSET', jk, 'state', 'delayed', 'due', at, 'deliveries', deliveries, 'lw', wait,
  'rw', ARGV[7])
redis.call('HDEL', jk, 'token')
redis.call('ZADD', k_delayed(q), at, id)
-- (no key: its limit's master couldn't be asked; it just tries again later)
if ARGV[6] ~= '' then
  local wk = P .. 'lwait:' .. wait
  -- A slot's waiters are listed by when they first waited (ms * 1000, + their ready order
  -- within the same ms), so a freed slot wakes the one that waited longest (FIFO, whatever
  -- its backoff); a rate's by their token's due time. Entries long past (promoted or purged
  -- meanwhile) are dropped, so the list stays about as long as what waits now.
  if ARGV[5] == 's' then
    local first = tonumber(redis.call('HGET', jk, 'lw0'))
    if not first then
      first = now * 1000 + (tonumber(redis.call('HGET', jk, 'seq')) or 0) % 1000
      redis.call('HSET', jk, 'lw0', first)
    end
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', (now - 3600000) * 1000)
    redis.call('ZADD', wk, first, id)
  else
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', now - 60000)
    redis.call('ZADD', wk, at, id)
  end
  redis.call('SADD', P .. 'lwaits', wait)  -- every lwait list of the queue, for purge
end
if redis.call('ZRANGE', k_delayed(q), 0, 0)[1] == id then arm(q) end
return 1
