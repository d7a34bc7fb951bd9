-- Release the unique key a task holds (found by its id), if it still holds it.
-- ARGV: prefix, task id.
local p, task = ARGV[1], ARGV[2]
local key = redis.call('GET', p .. 'uqid:' .. task)
if key then
  redis.call('DEL', p .. 'uqid:' .. task)
  if redis.call('GET', p .. 'uq:' .. key) == task then
    redis.call('DEL', p .. 'uq:' .. key)
  end
end
return 0
