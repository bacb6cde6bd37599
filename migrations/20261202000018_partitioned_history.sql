-- Issue 19: deliveries and attempts are range-partitioned by time, one
-- partition per UTC day, so retention drops a whole day's partition (the
-- same cost at ten million rows as at ten thousand) instead of deleting its
-- rows one batch at a time.
--
-- Each table as it was becomes its first partition, `<table>_legacy`,
-- attached as it is: no row is copied, none is lost. It holds everything
-- before the first daily partition (tomorrow, UTC, at the upgrade), is
-- pruned row by row as before until its whole range is past retention, and
-- is then dropped like any other partition. Partitions are made ahead by
-- replaysafe itself (history_partitions_ensure, at start and with every
-- retention run); this migration makes the first ones.
--
-- `events` stays one table: its unique (source, idem_key) stays one index.
-- A partitioned table's unique keys must hold its partition key, so the
-- primary keys become (id, time); ids still come from one sequence each.

CREATE TABLE history_partitions (
    parent    text PRIMARY KEY CHECK (parent IN ('deliveries', 'attempts')),
    -- The first daily partition's day; earlier rows are in <parent>_legacy.
    first_day date NOT NULL
);
INSERT INTO history_partitions (parent, first_day)
SELECT p, (now() AT TIME ZONE 'UTC')::date + 1 FROM unnest(ARRAY['deliveries', 'attempts']) AS p;

-- deliveries, by receipt time.
ALTER TABLE deliveries RENAME TO deliveries_legacy;
ALTER INDEX deliveries_pkey RENAME TO deliveries_legacy_pkey;
ALTER INDEX deliveries_by_source RENAME TO deliveries_legacy_by_source;
ALTER INDEX deliveries_by_event RENAME TO deliveries_legacy_by_event;
ALTER INDEX deliveries_unusual RENAME TO deliveries_legacy_unusual;
CREATE TABLE deliveries (LIKE deliveries_legacy
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)
    PARTITION BY RANGE (received_at);
-- The claim draws delivery ids from this sequence: it must outlive the
-- legacy partition, which retention drops one day.
ALTER SEQUENCE deliveries_id_seq OWNED BY deliveries.id;
ALTER TABLE deliveries_legacy ALTER COLUMN id DROP DEFAULT;
ALTER TABLE deliveries_legacy DROP CONSTRAINT deliveries_legacy_pkey,
    ADD CONSTRAINT deliveries_legacy_pkey PRIMARY KEY (id, received_at);
DO $$
BEGIN
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   (SELECT first_day FROM history_partitions WHERE parent = 'deliveries')::timestamp AT TIME ZONE 'UTC');
END $$;
-- Each attaches the legacy partition's equivalent index instead of building one.
ALTER TABLE deliveries ADD PRIMARY KEY (id, received_at);
CREATE INDEX deliveries_by_source ON deliveries (source, id DESC);
CREATE INDEX deliveries_by_event ON deliveries (event_id);
CREATE INDEX deliveries_unusual ON deliveries (outcome, id DESC) WHERE outcome <> 'claimed';
-- As before (migrations 6 and 11): ANALYZE skips the payloads.
ALTER TABLE deliveries
    ALTER COLUMN headers SET STATISTICS 0,
    ALTER COLUMN body SET STATISTICS 0,
    ALTER COLUMN body_sha256 SET STATISTICS 0;

-- attempts, by start time. Their foreign keys go, as the deliveries' did
-- (migration 5): each recorded attempt paid an after-trigger locking its
-- event row FOR KEY SHARE, and a pruned event's cascade would search every
-- partition. Attempts now go with their day's partition (retention_days);
-- readers reach them through their event.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_event_id_fkey,
    DROP CONSTRAINT IF EXISTS attempts_forced_by_fkey;
ALTER TABLE attempts RENAME TO attempts_legacy;
ALTER INDEX attempts_pkey RENAME TO attempts_legacy_pkey;
ALTER INDEX attempts_by_event RENAME TO attempts_legacy_by_event;
ALTER INDEX attempts_open RENAME TO attempts_legacy_open;
CREATE TABLE attempts (LIKE attempts_legacy
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)
    PARTITION BY RANGE (started_at);
ALTER SEQUENCE attempts_id_seq OWNED BY attempts.id;
ALTER TABLE attempts_legacy ALTER COLUMN id DROP DEFAULT;
ALTER TABLE attempts_legacy DROP CONSTRAINT attempts_legacy_pkey,
    ADD CONSTRAINT attempts_legacy_pkey PRIMARY KEY (id, started_at);
DO $$
BEGIN
    EXECUTE format('ALTER TABLE attempts ATTACH PARTITION attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   (SELECT first_day FROM history_partitions WHERE parent = 'attempts')::timestamp AT TIME ZONE 'UTC');
END $$;
ALTER TABLE attempts ADD PRIMARY KEY (id, started_at);
CREATE INDEX attempts_by_event ON attempts (event_id, id);
CREATE INDEX attempts_open ON attempts (id) WHERE finished_at IS NULL;

-- Makes the daily partitions from `days_back` days ago (but not before the
-- first daily day) to `days_ahead` days ahead that do not exist yet;
-- returns how many it made. Each is made
-- apart and then attached, which locks the parent only against other DDL
-- (SHARE UPDATE EXCLUSIVE), never against claims; its indexes are built by
-- the attach, on an empty table.
CREATE FUNCTION history_partitions_ensure(days_ahead integer, days_back integer DEFAULT 0)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    h record;
    col record;
    day date;
    today date := (now() AT TIME ZONE 'UTC')::date;
    name text;
    made integer := 0;
BEGIN
    -- One process at a time.
    PERFORM pg_advisory_xact_lock(hashtext('replaysafe history partitions'));
    FOR h IN SELECT parent, first_day FROM history_partitions ORDER BY parent LOOP
        FOR day IN SELECT d::date FROM generate_series(greatest(h.first_day, today - days_back),
                                                       today + days_ahead, interval '1 day') AS d LOOP
            name := h.parent || '_p' || to_char(day, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(quote_ident(name)) IS NOT NULL;
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                                INCLUDING STORAGE INCLUDING COMPRESSION)', name, h.parent);
            FOR col IN SELECT attname, attstattarget FROM pg_attribute
                       WHERE attrelid = h.parent::regclass AND attnum > 0 AND NOT attisdropped
                         AND attstattarget >= 0 LOOP
                EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                               name, col.attname, col.attstattarget);
            END LOOP;
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           h.parent, name, day::timestamp AT TIME ZONE 'UTC',
                           (day + 1)::timestamp AT TIME ZONE 'UTC');
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

SELECT history_partitions_ensure(14);
