-- Unique tasks (potatoq/brokers/unique.py): the key is held by the task's row itself
-- (unique_key, with a unique index), so these only run around a unique task's insert.

-- name: unique_release_expired
-- The backstop: a key held past its unique_for is released before the insert tries it.
UPDATE potatoq_jobs SET unique_key = NULL
WHERE unique_key = :unique_key AND unique_until IS NOT NULL AND unique_until <= :now;

-- name: unique_holder
-- The task holding a key, after an insert that the key stopped.
SELECT id FROM potatoq_jobs WHERE unique_key = :unique_key;
