-- Periodic fire-time dedup: the primary key (name, fire_time) lets exactly one caller win.

-- name: periodic_claim
INSERT INTO potatoq_periodic (name, fire_time) VALUES (:name, :fire_time)
ON CONFLICT (name, fire_time) DO NOTHING;

-- name: periodic_forget_old
-- Fire times older than :cutoff can't be raced for any more; drop them (per name, a PK range).
DELETE FROM potatoq_periodic WHERE name = :name AND fire_time < :cutoff;
