-- Extend the leases of slots still held. ARGV: prefix, lease ms, then key, holder pairs.
local p, lease = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #ARGV, 2 do
  redis.call('ZADD', p .. 'cl:run:' .. ARGV[i], 'XX', now + lease, ARGV[i + 1])
end
return 0
