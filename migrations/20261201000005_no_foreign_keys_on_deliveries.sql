-- Three more foreign keys leave the hot tables.
--
-- deliveries.redelivery_of -> deliveries ON DELETE SET NULL had no index on
-- redelivery_of, so every delivery retention deleted ran a sequential scan
-- of deliveries to null its references: pruning 200 of 150,000 rows took
-- 11.4 s, and a production table would never be pruned. It also erased the
-- mark that a delivery was a re-delivery once the original went. The id now
-- stays: a re-delivery remains one, and its original may be pruned.
--
-- deliveries.redelivered_by and events.forced_by -> users: users are
-- disabled, never deleted, and the code writes the signed-in user's id.
-- Every claim paid one after-trigger per row for each of the three, all
-- on NULL columns: dropping them gave 4.7% more claims per second at 8
-- connections (bench lab, 2 interleaved pairs).
ALTER TABLE deliveries
    DROP CONSTRAINT IF EXISTS deliveries_redelivery_of_fkey,
    DROP CONSTRAINT IF EXISTS deliveries_redelivered_by_fkey;
ALTER TABLE events
    DROP CONSTRAINT IF EXISTS events_forced_by_fkey;
