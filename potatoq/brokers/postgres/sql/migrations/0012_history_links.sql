-- Migration 0012: the task page's chain and group links (Broker.history_links): the records
-- of a task's children (parent_id) and of a group's members (group_id), read by index.
-- Partial: most tasks have neither, and a row without one costs these indexes nothing.

-- name: index_history_parent
CREATE INDEX potatoq_history_parent ON {schema}.potatoq_history (parent_id, seq) WHERE parent_id IS NOT NULL;

-- name: index_history_group
CREATE INDEX potatoq_history_group ON {schema}.potatoq_history (group_id, seq) WHERE group_id IS NOT NULL;
