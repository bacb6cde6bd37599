-- Issue 38: `GET /api/v1/events/stream` follows new events in the order
-- their claims committed, without skipping a claim that commits late.
--
-- Ids are drawn before commit and commit out of order, so "every id above
-- the last one sent" skips an event whose transaction was still running
-- when a higher id became visible. Each new event records the transaction
-- that claimed it instead. A snapshot's xmin is the oldest transaction
-- still running: every transaction below it has ended, so the set of
-- events claimed below it is final. A stream reads events whose claim_xid
-- lies between its cursor and the current xmin, in (claim_xid, id) order,
-- and never needs to look back.
--
-- Added without a default first: a volatile default on ADD COLUMN would
-- rewrite the table. Events from before this migration keep NULL (they
-- were claimed before any stream could follow them).
ALTER TABLE events ADD COLUMN claim_xid xid8;
ALTER TABLE events ALTER COLUMN claim_xid SET DEFAULT pg_current_xact_id();
-- One entry per new event, always appended at the right edge (xids grow).
CREATE INDEX events_claim_order ON events (claim_xid, id) WHERE claim_xid IS NOT NULL;
