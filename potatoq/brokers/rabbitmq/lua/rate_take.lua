-- Take a rate token of ARGV[2] now (returns {0}), reserve the next one when it is due within
-- the horizon (returns {ms until it is due, due ms, generation}), or else reserve nothing
-- (returns {ms to wait before looking again, 0, generation}): GCRA on the key's theoretical
-- arrival time (ms), see brokers/limits.py. A reserved token is the task's own and is waited
-- for in the claiming process; only tokens due within the horizon are reserved, so that a
-- task never starts long after its token's time (a task parked in the delay cascade comes
-- back at the tail of its queue, possibly behind a backlog: its token would then be spent
-- late, in a burst with current ones). A task coming back with a token (ARGV[7], ARGV[8]:
-- its due time and the generation it was reserved in) runs once that time has come, or
-- waits for the rest; one back much later than its time takes a fresh token instead. A rate set at run time starts a new generation: tokens reserved
-- before it are forgotten and taken again at the new rate. A task that reserved nothing is
-- told when to look again: its place in the key's line of waiters.
-- ARGV: prefix, key, ms per token carried, burst carried, task id, ms listed as waiting
-- beyond its token time, reserved due ms or '', its generation or '', horizon ms, longest
-- wait ms before looking again, least lateness ms after which a reserved token is stale,
-- looks a second the key's waiting tasks take at most in all.
local p, key, task, listed = ARGV[1], ARGV[2], ARGV[5], tonumber(ARGV[6])
local step, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local horizon, longest = tonumber(ARGV[9] or '1000'), tonumber(ARGV[10] or '10000')
local slack, looks = tonumber(ARGV[11] or '25'), tonumber(ARGV[12] or '10')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = p .. 'rl:wait:' .. key
local gen = tonumber(redis.call('GET', p .. 'rl:gen:' .. key) or '0')
-- The task runs now if ``due`` has come, else it waits (listed) until then.
local function answer(due)
  if due <= now then
    redis.call('ZREM', wait, task)
    return {0}
  end
  redis.call('ZADD', wait, due + listed, task)
  return {due - now, due, gen}
end
local set = redis.call('HGET', p .. 'rl:set', key)
if set then
  local s, b = string.match(set, '^([^|]*)|(.*)$')
  step, burst = tonumber(s), tonumber(b)
end
-- A token spent more than a burst's worth of tokens after its time is stale: its process
-- stalled (a starved or stopped machine) and would start it in a burst with the current
-- ones. Within it, a window of one second holds at most rate + burst starts. Never less
-- than ``slack`` ms, what taking a held task back costs.
local stale = math.max(burst * step, slack)
if ARGV[7] ~= '' and tonumber(ARGV[8]) == gen and tonumber(ARGV[7]) + stale >= now then
  return answer(tonumber(ARGV[7]))
end
redis.call('SADD', p .. 'rl:keys', key)
redis.call('HSET', p .. 'rl:seen', key, ARGV[3] .. '|' .. ARGV[4])
local tatkey = p .. 'rl:tat:' .. key
redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
local tat = math.max(tonumber(redis.call('GET', tatkey) or '0'), now)
local due = math.max(now, math.ceil(tat - (burst - 1) * step))
if due - now >= horizon then
  -- Nothing reserved: the task takes a place in the key's line of waiters (one token apart,
  -- after the last one and not before the next token) and looks again then; back early (a
  -- wait is cut at ``longest``) it keeps its place, back at or after it (others took the
  -- tokens meanwhile) it goes to the end.
  local mine = tonumber(redis.call('ZSCORE', wait, task) or '0') - listed
  local back
  if mine > now then
    back = mine - now
  else
    local last = redis.call('ZREVRANGE', wait, 0, 0, 'WITHSCORES')
    local place = due
    if last[2] then
      place = math.max(place, math.ceil(tonumber(last[2]) - listed + step))
    end
    back = place - now
    redis.call('ZADD', wait, place + listed, task)
  end
  -- Cut at ``longest`` so that a rate set at run time reaches it, or, with many waiting,
  -- at their number over ``looks``: each look is a publish, and a long line of tasks
  -- looking every few seconds would cost the other tasks in the queue their throughput.
  return {math.min(back, math.max(longest, redis.call('ZCARD', wait) * 1000 / looks)), 0, gen}
end
redis.call('SET', tatkey, string.format('%.3f', tat + step), 'PX', math.ceil(tat + step - now) + 60000)
return answer(due)
