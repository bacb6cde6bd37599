-- An ordered destination's keys held by an event that failed and waits to
-- be retried (issue 35): found without walking the ordered backlog queued
-- behind them, for the overview, /metrics and /api/v1/blocked-keys.
CREATE INDEX dispatches_ordered_retrying ON dispatches (source, destination, ordering_key, event_id)
    WHERE ordering_key IS NOT NULL AND state = 'retrying';
