-- When an operator's re-delivery last revived a dead event: its delivery
-- is timed from then (replaysafe_end_to_end_seconds), not from a receipt
-- days before. NULL: never revived; no default, so adding it rewrites
-- nothing.
ALTER TABLE events ADD COLUMN revived_at timestamptz;
