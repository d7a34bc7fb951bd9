-- purge: delete the waiting (ready and delayed) tasks of some queues; running ones stay.
-- KEYS: none (q:<queue>:ready/delayed, job:<id>)
-- ARGV: [1] prefix, [2..] queues
-- Returns: how many tasks were deleted.
local n = 0
for i = 2, #ARGV do
  local q = ARGV[i]
  for _, key in ipairs({k_ready(q), k_delayed(q)}) do
    local ids = redis.call('ZRANGE', key, 0, -1)
    for j = 1, #ids do n = n + redis.call('DEL', k_job(ids[j])) end
    redis.call('DEL', key)
  end
end
return n
