-- Migration 0005: count and purge a queue's delayed tasks without reading the jobs table.
-- The scheduled index is keyed by due time for promotion; queue stats and purge need the
-- delayed tasks of one queue, which it can't find without a pass over the whole table.

-- name: index_jobs_scheduled_queue
CREATE INDEX potatoq_jobs_scheduled_queue ON {schema}.potatoq_jobs (queue) WHERE state = 0;
