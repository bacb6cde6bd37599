-- Sync-mode events whose failed attempt waits for its provider's retry, for
-- the workers to adopt after a grace (events::lease). Without it each lease
-- scanned every due event's index entry looking for them. Ack-mode claims
-- never match the predicate, so they pay nothing for it.
CREATE INDEX events_request_waiting ON events (state_changed_at)
    WHERE state = 'retrying' AND forwarder = 'request';
