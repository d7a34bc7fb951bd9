-- claim_lost: after a claim (or settle_and_claim) call failed with a connection error,
-- find out what it did before calling it again: its reply may have been lost after the
-- server ran it, and running it again would claim a second task while the first stays
-- claimed until its lease runs out. The claim's fencing token is its request id: the
-- task it claimed is in the caller's held set with that token.
-- KEYS: none (held:<node>:<pid>, job:<id>)
-- ARGV: [1] prefix, [2] node, [3] pid, [4] the lost call's claim token,
--       [5] id and [6] token of the delivery it settled ('' when it settled none)
-- Returns: {claimed, settle_pending, id, queue, payload, deliveries, token, claimed_ms}:
--   claimed 1 with the delivery when the call ran and claimed one; settle_pending 1 when
--   the settled delivery still holds its claim (so the call didn't run).
local node, pid, token = ARGV[2], ARGV[3], ARGV[4]
local pending = 0
if ARGV[5] ~= '' then
  local job = redis.call('HMGET', k_job(ARGV[5]), 'token', 'state')
  if job[1] == ARGV[6] and job[2] == 'active' then pending = 1 end
end
local ids = redis.call('SMEMBERS', k_held(node, pid))
for i = 1, #ids do
  local job = redis.call('HMGET', k_job(ids[i]), 'token', 'state', 'node', 'pid', 'queue', 'payload',
    'deliveries', 'claimed')
  if job[1] == token and job[2] == 'active' and job[3] == node and job[4] == pid then
    return {1, pending, ids[i], job[5], job[6], tonumber(job[7]), token, tonumber(job[8])}
  end
end
return {0, pending}
