-- Chords: one row per header part (idempotent per index) and a fired flag per group.

-- name: chord_add_part
INSERT INTO potatoq_chord_parts (group_id, idx, value) VALUES (:group_id, :idx, :value)
ON CONFLICT (group_id, idx) DO NOTHING;

-- name: chord_upsert
INSERT INTO potatoq_chords (group_id, size, fired, expires_at) VALUES (:group_id, :size, 0, :expires_at)
ON CONFLICT (group_id) DO UPDATE SET expires_at = excluded.expires_at;

-- name: chord_fire
-- Exactly one join flips fired 0 -> 1: the one that saw all :size parts first.
UPDATE potatoq_chords SET fired = 1
WHERE group_id = :group_id AND fired = 0
  AND (SELECT count(*) FROM potatoq_chord_parts WHERE group_id = :group_id) >= size
RETURNING group_id;

-- name: chord_parts
SELECT p.value FROM potatoq_chord_parts AS p JOIN potatoq_chords AS c ON c.group_id = p.group_id
WHERE p.group_id = :group_id AND (c.expires_at IS NULL OR c.expires_at > :now)
ORDER BY p.idx;
