-- Pausing a queue for the whole fleet: a row per paused queue. Workers read the list about
-- twice a second and leave paused queues out of their claims (the claim SQL is unchanged).

-- name: pause_add
INSERT INTO {schema}.potatoq_paused (queue, since)
VALUES (%(queue)s, extract(epoch FROM clock_timestamp()))
ON CONFLICT (queue) DO NOTHING
RETURNING queue;

-- name: pause_remove
DELETE FROM {schema}.potatoq_paused WHERE queue = %(queue)s RETURNING queue;

-- name: pause_list
SELECT queue, since FROM {schema}.potatoq_paused ORDER BY queue;
