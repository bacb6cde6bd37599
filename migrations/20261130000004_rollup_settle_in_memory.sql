-- Each process now keeps its own settle marks in memory (rollup::Settling) and
-- folds every 250 ms in small steps, so the shared pending mark is unused.
ALTER TABLE rollup_progress DROP COLUMN pending_id, DROP COLUMN pending_at;
