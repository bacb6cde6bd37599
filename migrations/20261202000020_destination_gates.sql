-- Per-destination delivery control (issue 18): a destination's rate limit
-- holds across every process sharing the database. Its gate row is a token
-- bucket that each lease of the destination takes from under the row's
-- lock; the lease counts the destination's attempts in flight under the
-- same lock, for `max_in_flight`.
CREATE TABLE destination_gates (
    source      text NOT NULL,
    destination text NOT NULL,
    allowance   float8 NOT NULL,          -- attempts it may start now
    refilled_at timestamptz NOT NULL,
    PRIMARY KEY (source, destination)
);

-- Leases take each destination's due dispatches by themselves: one
-- destination's backlog is never scanned to find another's.
CREATE INDEX dispatches_due_by_destination ON dispatches (source, destination, next_attempt_at)
    WHERE state IN ('queued', 'retrying');

-- Each source's destinations as the config names them (no secrets), for
-- the Sources page and the API.
ALTER TABLE sources ADD COLUMN destinations jsonb NOT NULL DEFAULT '[]';
