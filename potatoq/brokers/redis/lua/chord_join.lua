-- chord_join: record one chord header part (idempotent per index); the join that brings
-- the distinct parts to the chord's size enqueues the callback, exactly once.
-- KEYS: none (chord:<group>, and the callback's queue keys)
-- ARGV: [1] prefix, [2] group, [3] index, [4] size, [5] value, [6] ttl ms,
--       [7..11] callback (id, queue, priority, due_ms, payload); id '' = don't enqueue it
-- Returns: 1 for the join that completed the chord, else 0.
local cb = nil
if ARGV[7] ~= '' then cb = {ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]} end
return chord_join(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], cb, now_ms())
