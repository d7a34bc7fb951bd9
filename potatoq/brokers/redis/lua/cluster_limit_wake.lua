-- cluster_limit_wake: make tasks of this queue that wait on a limit (cluster_limit_defer.lua)
-- due now and wake a worker: one after a slot of the key was given back, all of them
-- after a rate set at run time. Entries whose task moved on (claimed, revoked, purged)
-- are dropped on the way.
-- KEYS: none (the queue's keys)
-- ARGV: [1] prefix, [2] 's' (slot) or 'r' (rate), [3] limit key, [4] how many (0: all)
-- Returns: how many were made due.
local wait = ARGV[2] .. ':' .. ARGV[3]
local wk = P .. 'lwait:' .. wait
local n = tonumber(ARGV[4])
local now = now_ms()
local woken = 0
while n == 0 or woken < n do
  local popped = redis.call('ZPOPMIN', wk)
  if #popped == 0 then break end
  local id = popped[1]
  local job = redis.call('HMGET', k_job(id), 'state', 'lw', 'queue')
  if job[1] == 'delayed' and job[2] == wait then
    -- due at its first wait (a slot's waiter, listed by ms * 1000), so that it goes before
    -- those that came due by their backoff meanwhile; a rate's waiter now
    local due = now
    if ARGV[2] == 's' then due = math.min(math.floor(tonumber(popped[2]) / 1000), now) end
    redis.call('HSET', k_job(id), 'due', due)
    redis.call('ZADD', k_delayed(job[3]), due, id)
    arm(job[3])
    woken = woken + 1
  end
end
return woken
