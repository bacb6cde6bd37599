-- Who forwards an event (events::Forwarder): the worker pool, or the
-- provider's own requests in sync mode, inside which the destination is
-- called. Until now workers took ack-mode sources only, so a sync-mode
-- event queued by a re-delivery or a force was never forwarded by anyone.
ALTER TABLE events ADD COLUMN forwarder text NOT NULL DEFAULT 'workers'
    CHECK (forwarder IN ('workers', 'request'));
-- Sync claims that a provider request holds or will retry stay the requests';
-- queued ones (re-delivered or forced, never run) become the workers'.
UPDATE events SET forwarder = 'request'
WHERE state IN ('processing', 'retrying')
  AND source IN (SELECT slug FROM sources WHERE mode = 'sync');
-- A new event waits for its forwarder: fixtures need not name the state.
ALTER TABLE events ALTER COLUMN state SET DEFAULT 'queued';
