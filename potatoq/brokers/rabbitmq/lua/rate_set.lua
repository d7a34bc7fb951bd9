-- Override (empty: stop overriding) a rate limit, starting it again with a full burst and
-- a new generation (tokens reserved by parked tasks are taken again, at the new rate).
-- ARGV: prefix, key, ms per token, burst.
local p, key = ARGV[1], ARGV[2]
redis.call('DEL', p .. 'rl:tat:' .. key)
redis.call('INCR', p .. 'rl:gen:' .. key)
if ARGV[3] == '' then
  redis.call('HDEL', p .. 'rl:set', key)
else
  redis.call('HSET', p .. 'rl:set', key, ARGV[3] .. '|' .. ARGV[4])
  redis.call('SADD', p .. 'rl:keys', key)
end
return 0
