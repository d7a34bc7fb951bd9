-- A task that reserved its token came back for it: no longer waiting. ARGV: prefix, key, task id.
redis.call('ZREM', ARGV[1] .. 'rl:wait:' .. ARGV[2], ARGV[3])
return 0
