-- enqueue: store a batch of messages, each ready now or delayed until its due time.
-- KEYS: none (keys are built from the prefix, see _lib.lua)
-- ARGV: [1] prefix, [2] n, then n x (id, queue, priority, due_ms or '', payload)
-- Returns: {index, holder id, ...} (index from 1) for the unique messages not stored because
-- their key is held; ids already waiting or running are skipped.
local list = read_messages(3, tonumber(ARGV[2]))
local _, dups = enqueue_many(list, now_ms())
return dups
