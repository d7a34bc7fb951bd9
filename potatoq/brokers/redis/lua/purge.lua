-- purge: delete up to a batch of the waiting (ready and delayed) tasks of some queues;
-- running ones stay. The caller calls again while a full batch was deleted: one call runs
-- for milliseconds, so a million-task purge never blocks the server (a script runs alone)
-- for seconds. Tasks parked behind a full concurrency limit are waiting too: they are found
-- through the parked sets (limits:parked lists their keys) and deleted when they belong to a
-- queue purged here, in the call that found the queues' own sets empty.
-- KEYS: none (q:<queue>:ready/delayed, job:<id>, limits:parked, limit:<key>:parked)
-- ARGV: [1] prefix, [2] batch, [3..] queues
-- Returns: how many tasks were deleted (the batch size: call again).
local batch = tonumber(ARGV[2])
local n = 0
local purged = {}
for i = 3, #ARGV do
  local q = ARGV[i]
  purged[q] = true
  for _, key in ipairs({k_ready(q), k_delayed(q)}) do
    if n < batch then
      -- the first members by rank, then that rank range: never the whole set at once
      local ids = redis.call('ZRANGE', key, 0, batch - n - 1)
      for j = 1, #ids do
        unique_release(ids[j])
        redis.call('DEL', k_job(ids[j]))
      end
      if #ids > 0 then redis.call('ZREMRANGEBYRANK', key, 0, #ids - 1) end
      n = n + #ids
    end
  end
end
if n >= batch then return n end
local keys = redis.call('SMEMBERS', P .. 'limits:parked')
for i = 1, #keys do
  local pk = P .. 'limit:' .. keys[i] .. ':parked'
  local ids = redis.call('ZRANGE', pk, 0, -1)
  for j = 1, #ids do
    local job = redis.call('HMGET', k_job(ids[j]), 'queue', 'state')
    if not job[1] or (purged[job[1]] and job[2] == 'ready') then
      redis.call('ZREM', pk, ids[j])
      if job[1] then
        unique_release(ids[j])
        n = n + redis.call('DEL', k_job(ids[j]))
      end
    end
  end
end
return n
