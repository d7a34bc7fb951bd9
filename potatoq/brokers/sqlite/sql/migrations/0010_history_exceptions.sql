-- Migration 0010: exception-text search in task history walks only the records that carry
-- an exception (history_sql.Shape: the "text" window), newest first by seq, or by finish
-- time for a page with a time range. Partial: successes (most records) cost these indexes
-- nothing. They hold the exception type and message, so the text check (history_filters)
-- reads the index, not the row: a row is looked up only when it matches (measured at 1 M
-- rows: a page that reads 20,000 exception rows for a rare text cost a quarter of what it
-- did with the row looked up each time; the index is 4 MB there, the table 200 MB).

-- name: create_history_exc_index
CREATE INDEX potatoq_history_exc ON potatoq_history (seq, exc_type, exc_message) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;

-- name: create_history_exc_finished_index
CREATE INDEX potatoq_history_exc_finished ON potatoq_history (finished_at, exc_type, exc_message) WHERE exc_type IS NOT NULL OR exc_message IS NOT NULL;
