-- heartbeat: record a worker node's info and when it was seen (server clock); forget
-- nodes silent for longer than the prune age.
-- KEYS: none (workers, workers:seen)
-- ARGV: [1] prefix, [2] node, [3] encoded WorkerInfo, [4] prune age ms
-- Returns: the server time in ms.
local now = now_ms()
local seen = P .. 'workers:seen'
local gone = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. (now - tonumber(ARGV[4])))
for i = 1, #gone do
  redis.call('HDEL', P .. 'workers', gone[i])
  redis.call('ZREM', seen, gone[i])
end
redis.call('HSET', P .. 'workers', ARGV[2], ARGV[3])
redis.call('ZADD', seen, now, ARGV[2])
return now
