-- Pausing a queue for the whole fleet: a row per paused queue. Workers read the list about
-- twice a second and leave paused queues out of their claims (the claim SQL is unchanged).

-- name: pause_add
INSERT INTO potatoq_paused (queue, since) VALUES (:queue, :since)
ON CONFLICT (queue) DO NOTHING;

-- name: pause_remove
DELETE FROM potatoq_paused WHERE queue = :queue;

-- name: pause_list
SELECT queue, since FROM potatoq_paused ORDER BY queue;
