-- revoke: delete a waiting (ready or delayed) task. A running one is left alone.
-- KEYS: none (job:<id>, q:<queue>:ready/delayed)
-- ARGV: [1] prefix, [2] id
-- Returns: 1 if a waiting task was deleted, else 0.
local id = ARGV[2]
local job = redis.call('HMGET', k_job(id), 'queue', 'state')
if not job[1] or (job[2] ~= 'ready' and job[2] ~= 'delayed') then return 0 end
redis.call('ZREM', k_ready(job[1]), id)
redis.call('ZREM', k_delayed(job[1]), id)
unique_release(id)
redis.call('DEL', k_job(id))
return 1
