-- cluster_chord_join: record one chord part relayed from an outbox entry (cluster layout);
-- the callback is enqueued by the relay (cluster_relay_enqueue, marked per group, so once).
-- KEYS: [1] the chord's prefix (routing only)
-- ARGV: [1] prefix, [2] group, [3] index, [4] size, [5] value, [6] ttl ms
-- Returns: {complete, fired now}: complete = 1 once every part is in (on every join after
--          too, so a relay that died before enqueueing the callback is completed again).
local ck = P .. 'chord:' .. ARGV[2]
if redis.call('HSETNX', ck, 'p:' .. ARGV[3], ARGV[5]) == 1 then
  redis.call('HINCRBY', ck, 'n', 1)
end
redis.call('PEXPIRE', ck, ARGV[6])
if tonumber(redis.call('HGET', ck, 'n')) < tonumber(ARGV[4]) then return {0, 0} end
return {1, redis.call('HSETNX', ck, 'fired', '1')}
