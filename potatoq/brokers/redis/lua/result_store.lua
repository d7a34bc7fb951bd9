-- result_store: write (overwrite) a result with its expiry and wake whoever waits on it.
-- KEYS: none (result:<id>, waiting:<id>, notify:<id>)
-- ARGV: [1] prefix, [2] task id, [3] encoded ResultRecord, [4] ttl ms
-- Returns: 1
write_result(ARGV[2], ARGV[3], ARGV[4])
return 1
