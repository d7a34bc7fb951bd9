-- Migration 0010: exception-text search in task history walks only the records that carry
-- an exception (history_sql.Shape: the "text" window), newest first by seq, or by finish
-- time for a page with a time range. Partial: successes (most records) cost these indexes
-- nothing; the text itself is checked on each row read (see history_filters).

-- name: create_history_exc_index
CREATE INDEX potatoq_history_exc ON potatoq_history (seq) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

-- name: create_history_exc_finished_index
CREATE INDEX potatoq_history_exc_finished ON potatoq_history (finished_at) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;
