-- dead_purge: delete every dead letter.
-- KEYS: none (dead, dead:payload, dead:info)
-- ARGV: [1] prefix
-- Returns: how many were deleted.
local n = redis.call('ZCARD', P .. 'dead')
redis.call('DEL', P .. 'dead', P .. 'dead:payload', P .. 'dead:info')
return n
