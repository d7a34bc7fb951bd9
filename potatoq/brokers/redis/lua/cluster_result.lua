-- cluster_result: write a result relayed from an outbox entry (cluster layout), unless a
-- newer one is stored: a late relay (a recovery round) never replaces the result of a
-- later run of the same task.
-- KEYS: [1] the result's prefix (routing only)
-- ARGV: [1] prefix, [2] task id, [3] encoded ResultRecord, [4] ttl ms, [5] stamp ms
-- Returns: 1 if written, 0 if a newer result is stored.
local sk = k_result(ARGV[2]) .. ':at'
if (tonumber(redis.call('GET', sk)) or -1) > tonumber(ARGV[5]) then return 0 end
redis.call('SET', sk, ARGV[5], 'PX', ARGV[4])
write_result(ARGV[2], ARGV[3], ARGV[4])
return 1
