-- Give a slot back. ARGV: prefix, key, holder.
redis.call('ZREM', ARGV[1] .. 'cl:run:' .. ARGV[2], ARGV[3])
return 0
