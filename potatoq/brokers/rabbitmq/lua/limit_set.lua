-- Override (or, with an empty value, stop overriding) a concurrency limit. ARGV: prefix, key, max.
local p, key = ARGV[1], ARGV[2]
if ARGV[3] == '' then
  redis.call('HDEL', p .. 'cl:set', key)
else
  redis.call('HSET', p .. 'cl:set', key, ARGV[3])
  redis.call('SADD', p .. 'cl:keys', key)
end
return 0
