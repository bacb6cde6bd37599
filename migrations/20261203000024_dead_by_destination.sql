-- Dead letters are counted as events with each destination's dead
-- dispatches beside them (`events::backlog`): the dead index carries the
-- destination and the event, so those counts stay index-only scans.
DROP INDEX dispatches_dead;
CREATE INDEX dispatches_dead ON dispatches (state_changed_at DESC)
    INCLUDE (source, destination, event_id)
    WHERE state = 'dead';
