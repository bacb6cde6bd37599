-- Ordered destinations (issue 18, `ordering = "per_key"`): a dispatch of
-- one carries its event's ordering key (the value at the destination's
-- `ordering_key` pointer; '' for all of a destination's events when it
-- names none), and is leased only while no other dispatch of the same key
-- is in flight and none received before it waits. NULL: not ordered.
ALTER TABLE dispatches ADD COLUMN ordering_key text;

-- The lease's look-up of a dispatch's unsettled predecessors.
CREATE INDEX dispatches_ordered ON dispatches (source, destination, ordering_key, event_id)
    WHERE ordering_key IS NOT NULL AND state IN ('queued', 'processing', 'retrying');
