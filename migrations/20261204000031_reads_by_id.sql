-- Issue 37: reads of the partitioned history by delivery id, bounded to the
-- partitions the id can be in, and the status filter of the deliveries
-- list kept off a scan of the whole history.
--
-- A delivery's id is drawn during its claim's statement and its receipt
-- time is that statement's start, so ids ascend with time, give or take a
-- transaction. Once a day is over (an hour past its end: no claim that
-- began in it is still running), its partition's lowest and highest ids
-- are noted here (history_id_ranges_note, at start and with each retention
-- run): two index endpoint reads per day, once. A read by id then looks at
-- the days whose ranges hold it, or the days after the last noted one, and
-- only when that finds nothing, everywhere (a claim that ran across
-- midnight, or an id that does not exist).
CREATE TABLE history_id_ranges (
    parent   text NOT NULL CHECK (parent IN ('deliveries', 'attempts')),
    -- The partition's range of times: [starts, ends); the legacy
    -- partition's starts at -infinity.
    starts   timestamptz NOT NULL,
    ends     timestamptz NOT NULL,
    -- NULL for a day with no row.
    first_id bigint,
    last_id  bigint,
    PRIMARY KEY (parent, ends)
);

-- The attached delivery partitions and their ranges of times.
CREATE FUNCTION history_delivery_partitions(OUT relname name, OUT starts timestamptz, OUT ends timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT c.relname,
           CASE WHEN c.relname = 'deliveries_legacy' THEN '-infinity'::timestamptz
                ELSE to_date(substring(c.relname FROM '_p([0-9]{8})$'), 'YYYYMMDD')::timestamp
                     AT TIME ZONE 'UTC' END,
           CASE WHEN c.relname = 'deliveries_legacy' THEN h.first_day::timestamp AT TIME ZONE 'UTC'
                ELSE (to_date(substring(c.relname FROM '_p([0-9]{8})$'), 'YYYYMMDD') + 1)::timestamp
                     AT TIME ZONE 'UTC' END
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN history_partitions h ON h.parent = 'deliveries'
    WHERE i.inhparent = 'deliveries'::regclass AND NOT i.inhdetachpending
$$;

-- Notes the id range of each delivery partition whose day has been over
-- for an hour and has none yet, and forgets those of dropped partitions;
-- returns how many it noted.
CREATE FUNCTION history_id_ranges_note() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    p record;
    lo bigint;
    hi bigint;
    noted integer := 0;
BEGIN
    FOR p IN SELECT * FROM history_delivery_partitions() LOOP
        CONTINUE WHEN p.ends > now() - interval '1 hour'
            OR EXISTS (SELECT 1 FROM history_id_ranges r WHERE r.parent = 'deliveries' AND r.ends = p.ends);
        EXECUTE format('SELECT min(id), max(id) FROM %I', p.relname) INTO lo, hi;
        INSERT INTO history_id_ranges (parent, starts, ends, first_id, last_id)
        VALUES ('deliveries', p.starts, p.ends, lo, hi)
        ON CONFLICT DO NOTHING;
        noted := noted + 1;
    END LOOP;
    DELETE FROM history_id_ranges r
    WHERE r.parent = 'deliveries' AND r.ends NOT IN (SELECT ends FROM history_delivery_partitions());
    RETURN noted;
END $$;

-- The receipt times [lo, hi) a delivery with this id can have, from the
-- noted ranges: the days whose ranges hold it; else the gap between the
-- noted days around it (after the last one: every day since). NULL: no
-- bound on that side. A set-returning SQL function, so that it is inlined
-- into the statement that reads it.
CREATE FUNCTION delivery_received_bounds(delivery_id bigint)
RETURNS TABLE (lo timestamptz, hi timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT min(starts) FROM history_id_ranges
                     WHERE parent = 'deliveries' AND delivery_id BETWEEN first_id AND last_id),
                    (SELECT max(ends) FROM history_id_ranges
                     WHERE parent = 'deliveries' AND last_id < delivery_id)),
           coalesce((SELECT max(ends) FROM history_id_ranges
                     WHERE parent = 'deliveries' AND delivery_id BETWEEN first_id AND last_id),
                    (SELECT min(starts) FROM history_id_ranges
                     WHERE parent = 'deliveries' AND first_id > delivery_id))
$$;

SELECT history_id_ranges_note();

-- Where an event's history begins, for reads through the event: each of
-- its deliveries and attempts was recorded by a statement that ended after
-- its claim's began; one that began earlier (a copy waiting on the claim's
-- row lock) began less than a day earlier, by far.
CREATE FUNCTION event_history_starts(first_seen_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$ SELECT first_seen_at - interval '1 day' $$;

-- The deliveries list filtered by an answer other than 200 (a 4xx, a 409,
-- a 5xx): newest first among those rows only, instead of walking the whole
-- history newest first for the few that match. Ack-mode claims (200) are
-- not in it, so claims pay nothing for it.
CREATE INDEX deliveries_unusual_status ON deliveries (id DESC) INCLUDE (http_status)
    WHERE http_status <> 200;
