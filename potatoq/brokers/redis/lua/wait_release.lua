-- wait_release: a timer waiter (see wait_plan.lua) stopped waiting: hand the timer on.
-- Woken early (its marker popped, or interrupted), it gives the timer up and wakes one
-- other idle waiter to take it over, so the due task isn't left to the others' long cap
-- while this thread runs a task or shuts down. Woken at its due time, it claims that task
-- itself and wakes one other waiter only if more delayed tasks wait, to time the next.
-- KEYS: none (q:<queue>:timer, q:<queue>:delayed, q:<queue>:marker)
-- ARGV: [1] prefix, [2] this waiter's id, [3] the timed queue, [4] '1' woken at its due time
-- Returns: 1 if another waiter was woken, else 0.
local q = ARGV[3]
local tk = P .. 'q:' .. q .. ':timer'
local held = redis.call('GET', tk)
local mine = held and string.sub(held, -(#ARGV[2] + 1)) == ' ' .. ARGV[2]
if mine then redis.call('DEL', tk) end
if ARGV[4] == '1' then
  if redis.call('ZCARD', k_delayed(q)) < 2 then return 0 end
elseif not mine then
  return 0
end
-- The hand-off is its own marker member ('h'): a waiter that pops it while it holds the
-- timer itself (it handed the timer on, then came back and took it again, with nobody
-- else waiting) keeps timing instead of waking, so a lone waiter doesn't spin.
redis.call('ZADD', k_marker(q), 0, 'h')
return 1
