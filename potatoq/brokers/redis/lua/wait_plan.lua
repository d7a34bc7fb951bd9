-- wait_plan: how long an idle worker thread may block on the queues' markers, so that
-- exactly one waiter wakes for the next due delayed task. The first waiter to see a due
-- time becomes that queue's timer (q:<queue>:timer, expiring at the due time) and blocks
-- until then; the others block for the whole cap: an enqueue that makes a task the
-- earliest arms the marker, and the waiter it wakes takes the timer over. A timer that
-- wakes early (its marker popped, or interrupted) hands the timer on (wait_release.lua).
-- KEYS: none (q:<queue>:delayed, q:<queue>:timer)
-- ARGV: [1] prefix, [2] this waiter's id, [3] cap ms, [4..] queues
-- Returns: {block ms (0 = something is due already), the timed queue or ''}
local now = now_ms()
local cap = tonumber(ARGV[3])
local due, timed = nil, nil
for i = 4, #ARGV do
  local first = redis.call('ZRANGE', k_delayed(ARGV[i]), 0, 0, 'WITHSCORES')
  if #first > 0 and (not due or tonumber(first[2]) < due) then
    due, timed = tonumber(first[2]), ARGV[i]
  end
end
if not due then return {cap, ''} end
if due <= now then return {0, ''} end
if due - now >= cap then return {cap, ''} end
local tk = P .. 'q:' .. timed .. ':timer'
local mine = string.format('%.0f', due) .. ' ' .. ARGV[2]
local held = redis.call('GET', tk)
-- Free, mine already, or set for a later task than the earliest now (take it over).
if not held or held == mine or tonumber(string.match(held, '^(%d+)')) > due then
  redis.call('SET', tk, mine, 'PX', math.max(1, due - now))
  return {due - now, timed}
end
return {cap, ''}
