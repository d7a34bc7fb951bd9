-- Lazy expiry, done by recover() (which every worker runs periodically) after a cheap read.

-- name: housekeeping_due
SELECT EXISTS (SELECT 1 FROM potatoq_results WHERE expires_at <= :now)
    OR EXISTS (SELECT 1 FROM potatoq_chords WHERE expires_at <= :now)
    OR EXISTS (SELECT 1 FROM potatoq_dead WHERE died_at < :dead_cutoff);

-- name: housekeeping_results
-- One bounded batch, in its own short write transaction: recover() repeats it until a batch
-- comes back short, so a backlog after downtime never holds the write lock for long.
DELETE FROM potatoq_results
WHERE rowid IN (SELECT rowid FROM potatoq_results WHERE expires_at <= :now
                ORDER BY expires_at, rowid LIMIT :limit);

-- name: housekeeping_chord_parts
-- The parts of the next batch of expired chords (housekeeping_chords then deletes the same
-- batch, in the same transaction).
DELETE FROM potatoq_chord_parts
WHERE group_id IN (SELECT group_id FROM potatoq_chords WHERE expires_at <= :now
                   ORDER BY expires_at, rowid LIMIT :limit);

-- name: housekeeping_chords
DELETE FROM potatoq_chords
WHERE rowid IN (SELECT rowid FROM potatoq_chords WHERE expires_at <= :now
                ORDER BY expires_at, rowid LIMIT :limit);
