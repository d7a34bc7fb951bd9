-- held_by: the deliveries one worker process still holds, oldest claim first (what its
-- supervisor asks after the process died, and for the leases and heartbeats of processes
-- that don't report each task). Read from that process's held set, so it costs what the
-- process holds, not what the whole cluster runs.
-- KEYS: none (held:<node>:<pid>, job:<id>)
-- ARGV: [1] prefix, [2] node, [3] pid
-- Returns: a list of {id, queue, payload, deliveries, token, claimed_ms}.
local node, pid = ARGV[2], ARGV[3]
local hk = k_held(node, pid)
local ids = redis.call('SMEMBERS', hk)
local out = {}
for i = 1, #ids do
  local id = ids[i]
  local job = redis.call('HMGET', k_job(id), 'state', 'node', 'pid', 'queue', 'payload',
    'deliveries', 'token', 'claimed')
  if job[1] == 'active' and job[2] == node and job[3] == pid then
    out[#out + 1] = {id, job[4], job[5], tonumber(job[6]), job[7], tonumber(job[8])}
  else
    -- Its claim ended without the set being told (the hash evicted, say): drop it.
    redis.call('SREM', hk, id)
  end
end
table.sort(out, function(a, b) return (a[6] or 0) < (b[6] or 0) end)
return out
