-- queue_stats: per-queue counts (read only). Due delayed tasks count as waiting.
-- The oldest waiting task is found without a scan: FIFO within a priority means the
-- first member of each priority band is that band's oldest, so only band heads are read.
-- KEYS: none (queues, q:<queue>:ready/delayed/active, job:<id>)
-- ARGV: [1] prefix
-- Returns: {now_ms, then per queue: name, ready, due delayed, later delayed, active,
--           oldest waiting since (ms) or ''}
local now = now_ms()
local out = {now}
local queues = redis.call('SMEMBERS', P .. 'queues')
table.sort(queues)
for qi = 1, #queues do
  local q = queues[qi]
  local rk = k_ready(q)
  local oldest = nil
  local head = redis.call('ZRANGE', rk, 0, 0, 'WITHSCORES')
  local bands = 0
  while #head > 0 and bands < 64 do
    local since = tonumber(redis.call('HGET', k_job(head[1]), 'ready_at'))
    if since and (not oldest or since < oldest) then oldest = since end
    -- score = band * 2^40 + seq with 0 < seq < 2^40, so the next band starts at (band+1) * 2^40
    local band = math.floor(tonumber(head[2]) / PRIO_SHIFT)
    head = redis.call('ZRANGEBYSCORE', rk, string.format('%.0f', (band + 1) * PRIO_SHIFT),
      '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    bands = bands + 1
  end
  local first_due = redis.call('ZRANGE', k_delayed(q), 0, 0, 'WITHSCORES')
  if #first_due > 0 and tonumber(first_due[2]) <= now and
     (not oldest or tonumber(first_due[2]) < oldest) then
    oldest = tonumber(first_due[2])
  end
  local due = redis.call('ZCOUNT', k_delayed(q), '-inf', now)
  local delayed = redis.call('ZCARD', k_delayed(q)) - due
  out[#out + 1] = q
  out[#out + 1] = redis.call('ZCARD', rk)
  out[#out + 1] = due
  out[#out + 1] = delayed
  out[#out + 1] = redis.call('ZCARD', k_active(q))
  out[#out + 1] = oldest and string.format('%.0f', oldest) or ''
end
return out
