-- cluster_rate_waited: whether a delivered task had waited for a rate token
-- (cluster_limit_defer.lua marks it), forgotten by the claim that delivered it: its
-- token take (cluster_rate_take.lua) then keeps its place in line.
-- KEYS: none (the job's hash)
-- ARGV: [1] prefix, [2] id, [3] fencing token of the delivery
-- Returns: 1 if it had waited, else 0.
local jk = k_job(ARGV[2])
local job = redis.call('HMGET', jk, 'token', 'rw')
if job[1] ~= ARGV[3] or not job[2] or job[2] == '' then return 0 end
redis.call('HDEL', jk, 'rw')
return 1
