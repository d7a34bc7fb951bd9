-- Migration 0002: queues paused for the whole fleet (potatoq queues pause NAME).

-- name: create_paused
CREATE TABLE potatoq_paused (
    queue TEXT PRIMARY KEY,
    since REAL NOT NULL
) WITHOUT ROWID;
