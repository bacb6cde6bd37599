-- Forced re-execution (spec section 6): an admin sends a completed event to
-- the destination again. The event remembers who forced it and why; attempts
-- already record `forced_by`.
ALTER TABLE events
    ADD COLUMN forced_by     bigint REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN forced_at     timestamptz,
    ADD COLUMN forced_reason text;

-- Dead-letter counts per source (overview, /metrics) read this index alone,
-- without visiting the table. Only events going dead write to it.
DROP INDEX events_dead;
CREATE INDEX events_dead ON events (state_changed_at DESC) INCLUDE (source) WHERE state = 'dead';
