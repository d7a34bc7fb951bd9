-- Migration 0003: queues paused for the whole fleet (potatoq queues pause NAME).

-- name: create_paused
CREATE TABLE {schema}.potatoq_paused (
    queue  text             PRIMARY KEY,
    since  double precision NOT NULL
);
