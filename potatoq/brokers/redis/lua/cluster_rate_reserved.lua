-- cluster_rate_reserved: the rate token reserved for a task while it waited
-- (cluster_limit_defer.lua), read and forgotten by the claim that delivered it (a token
-- is used once: a later delivery of the same task takes a new one).
-- KEYS: none (the job's hash)
-- ARGV: [1] prefix, [2] id, [3] fencing token of the delivery
-- Returns: {due ms, generation}, or {} when it reserved none.
local jk = k_job(ARGV[2])
local job = redis.call('HMGET', jk, 'token', 'rtd', 'rtg')
if job[1] ~= ARGV[3] or not job[2] or job[2] == '' then return {} end
redis.call('HDEL', jk, 'rtd', 'rtg')
return {job[2], job[3]}
