-- cluster_rate_take: take a rate token of a key now, in the key's own slot (cluster_limits.py).
-- GCRA as in the claim script of a single server (_lib.lua's rate_next / take_token): the
-- token is taken by the claim that runs the task, never reserved ahead, so workers that fall
-- behind can't use several late tokens at once. The keys are those of the RabbitMQ broker's
-- rate scripts (rl:tat:<key>, rl:set, rl:seen, rl:keys, rl:wait:<key>, rl:gen:<key>), whose
-- rate_set.lua and rate_usage.lua this broker runs on them unchanged.
-- KEYS: none (the key's slot)
-- ARGV: [1] prefix, [2] key, [3] ms per token carried, [4] burst carried, [5] task id,
--       [6] ms it stays listed as waiting past its retry, [7] '1' if it waited already
-- Returns: 0 when the token was taken, else the ms until the task's token is expected (it
-- waits that long: one token after the last task told to wait, so waiters spread out).
local p, key, task, listed = ARGV[1], ARGV[2], ARGV[5], tonumber(ARGV[6])
local step, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
redis.call('SADD', p .. 'rl:keys', key)
redis.call('HSET', p .. 'rl:seen', key, ARGV[3] .. '|' .. ARGV[4])
local set = redis.call('HGET', p .. 'rl:set', key)
if set then
  local s, b = string.match(set, '^([^|]*)|(.*)$')
  step, burst = tonumber(s), tonumber(b)
end
local wait = p .. 'rl:wait:' .. key
redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
local tatkey = p .. 'rl:tat:' .. key
local tat = tonumber(redis.call('GET', tatkey) or '0')
local next_at = tat - (burst - 1) * step
if next_at <= now then
  local moved = math.max(tat, now) + step
  redis.call('SET', tatkey, string.format('%.3f', moved), 'PX', math.ceil(moved - now) + 60000)
  redis.call('ZREM', wait, task)
  return 0
end
-- The spread of waiters, per generation (rate_set.lua starts a new one: its waiters come
-- back at once and spread again at the new rate). A task that waited already and came
-- back a little early takes the next token rather than going to the back of the line.
local gen = redis.call('GET', p .. 'rl:gen:' .. key) or '0'
local dk = p .. 'rl:defer:' .. key
local d_gen, d_at = string.match(redis.call('GET', dk) or '', '^([^|]*)|(.*)$')
local defer = (d_gen == gen and tonumber(d_at)) or 0
local at = ARGV[7] == '1' and next_at or math.max(next_at, defer)
local spread = math.max(defer, at + step)
redis.call('SET', dk, gen .. '|' .. string.format('%.3f', spread), 'PX', math.ceil(spread - now) + 60000)
redis.call('ZADD', wait, at + listed, task)
return math.max(1, math.ceil(at - now))
