-- extend: push the lease deadline of running deliveries (still held by their token).
-- KEYS: none (job:<id>, q:<queue>:active)
-- ARGV: [1] prefix, [2] ttl ms, [3] n, then n x (id, token)
-- Returns: how many leases were extended.
local deadline = now_ms() + tonumber(ARGV[2])
local extended = 0
for i = 0, tonumber(ARGV[3]) - 1 do
  local id, token = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  local job = fenced(id, token)
  if job then
    redis.call('ZADD', k_active(job.queue), 'XX', deadline, id)
    extended = extended + 1
  end
end
return extended
