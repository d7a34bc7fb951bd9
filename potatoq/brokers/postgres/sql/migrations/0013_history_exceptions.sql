-- Migration 0013: exception-text search in task history walks only the records that carry
-- an exception (history_sql.Shape: the "text" window), newest first by seq, or by finish
-- time for a page with a time range. Partial: successes (most records) cost these indexes
-- nothing; the text itself is checked on each row read (see history_filters).

-- name: index_history_exc
CREATE INDEX potatoq_history_exc ON {schema}.potatoq_history (seq) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

-- name: index_history_exc_finished
CREATE INDEX potatoq_history_exc_finished ON {schema}.potatoq_history (finished_at, seq) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;
