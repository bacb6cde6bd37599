-- When an evaluation last saw a firing alert's condition hold: it resolves
-- only after its condition has not held for `resolve_after_secs`
-- (hysteresis), and one that no process evaluates any more (its source or
-- rule left every config) resolves after a longer quiet.
ALTER TABLE alerts ADD COLUMN held_at timestamptz NOT NULL DEFAULT now();
