-- Migration 0002: a task id that dies twice keeps both dead letters.
-- 0001 keyed potatoq_dead by the task id, so a second death overwrote the first (SQLite and
-- the other brokers keep both). The key becomes the letter's own seq; lookups by id (retry
-- of chosen ids) use a plain index.

-- name: dead_drop_id_key
ALTER TABLE {schema}.potatoq_dead DROP CONSTRAINT potatoq_dead_pkey;

-- name: dead_key_seq
ALTER TABLE {schema}.potatoq_dead ADD CONSTRAINT potatoq_dead_pkey PRIMARY KEY (seq);

-- name: index_dead_id
CREATE INDEX potatoq_dead_id ON {schema}.potatoq_dead (id);
