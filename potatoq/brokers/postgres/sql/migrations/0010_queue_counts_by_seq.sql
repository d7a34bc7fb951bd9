-- Migration 0010: a queue's delayed and parked tasks in enqueue order, so that queue_stats()
-- can estimate a count past its cap from windows of seq in the queue's own index entries
-- (potatoq/brokers/estimates.py), as it does for ready tasks (potatoq_jobs_ready ends in
-- seq). The indexes keyed by queue alone can only be counted end to end. Both new indexes
-- are built before the old ones are dropped: the builds hold the table's write lock (reads
-- go on; 3.3 s for 1,000,000 delayed tasks on a loaded 2-core VM), and the drops' exclusive
-- lock is taken last, held only until the migration commits.

-- name: index_jobs_scheduled_queue_seq
CREATE INDEX potatoq_jobs_scheduled_queue_seq ON {schema}.potatoq_jobs (queue, seq) WHERE state = 0;

-- name: index_jobs_parked_queue_seq
CREATE INDEX potatoq_jobs_parked_queue_seq ON {schema}.potatoq_jobs (queue, seq) WHERE state = 1 AND parked;

-- name: drop_jobs_scheduled_queue
DROP INDEX {schema}.potatoq_jobs_scheduled_queue;

-- name: drop_jobs_parked_queue
DROP INDEX {schema}.potatoq_jobs_parked_queue;
