-- Migration 0009: the task page's chain and group links (Broker.history_links): the records
-- of a task's children (parent_id) and of a group's members (group_id), read by index.
-- Partial: most tasks have neither, and a row without one costs these indexes nothing.

-- name: create_history_parent_index
CREATE INDEX potatoq_history_parent ON potatoq_history (parent_id, seq) WHERE parent_id IS NOT NULL;

-- name: create_history_group_index
CREATE INDEX potatoq_history_group ON potatoq_history (group_id, seq) WHERE group_id IS NOT NULL;
