-- Lazy expiry, done by recover() (which every worker runs periodically) after a cheap read.

-- name: housekeeping_due
SELECT EXISTS (SELECT 1 FROM potatoq_results WHERE expires_at <= :now)
    OR EXISTS (SELECT 1 FROM potatoq_chords WHERE expires_at <= :now)
    OR EXISTS (SELECT 1 FROM potatoq_dead WHERE died_at < :dead_cutoff);

-- name: housekeeping_results
DELETE FROM potatoq_results WHERE expires_at <= :now;

-- name: housekeeping_chord_parts
DELETE FROM potatoq_chord_parts
WHERE group_id IN (SELECT group_id FROM potatoq_chords WHERE expires_at <= :now);

-- name: housekeeping_chords
DELETE FROM potatoq_chords WHERE expires_at <= :now;
