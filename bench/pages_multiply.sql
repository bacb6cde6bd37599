-- bench/pages: multiplies a history `replaysafe seed` made through the real
-- receiver and workers into :generations copies of itself, so that ten
-- million deliveries keep the shape of real ones (duplicates, rejections,
-- retries, dead letters) without 25 minutes of receiving. Copy k of a row
-- takes id * :generations + k (every reference between rows mapped the same
-- way, so each copy is a history of its own), its key a suffix, and its
-- times k steps later, a step being the base's spacing divided among the
-- copies: ids still ascend with receipt time, as they do in production.
\set ON_ERROR_STOP on
BEGIN;
CREATE TEMP TABLE base_deliveries AS SELECT * FROM deliveries;
CREATE TEMP TABLE base_events AS SELECT * FROM events;
CREATE TEMP TABLE base_dispatches AS SELECT * FROM dispatches;
CREATE TEMP TABLE base_attempts AS SELECT * FROM attempts;
TRUNCATE deliveries, events, dispatches, attempts;

-- Inserts the copies of base_<tab> into <tab>, each column as `remap` says
-- (an expression over the base row and k) or as it was.
CREATE FUNCTION pg_temp.multiply(tab text, generations int, step interval, remap jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cols text;
    exprs text;
BEGIN
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum),
           string_agg(coalesce(remap ->> attname, 'b.' || quote_ident(attname)), ', ' ORDER BY attnum)
      INTO cols, exprs
      FROM pg_attribute WHERE attrelid = tab::regclass AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM base_%s b, generate_series(0, %s - 1) k ORDER BY 1',
                   tab, cols, replace(replace(exprs, ':g', generations::text), ':step', quote_literal(step)),
                   tab, generations);
END $$;

-- The copies' spacing: the base's, divided among them.
SELECT (max(received_at) - min(received_at)) / greatest(count(*), 1) / :generations AS step
FROM base_deliveries \gset
SELECT pg_temp.multiply('deliveries', :generations, :'step', '{
    "id": "b.id * :g + k",
    "event_id": "b.event_id * :g + k",
    "redelivery_of": "b.redelivery_of * :g + k",
    "redelivered_by": "b.redelivered_by * :g + k",
    "idem_key": "b.idem_key || ''~'' || k",
    "received_at": "b.received_at + k * :step::interval"
  }');
SELECT pg_temp.multiply('events', :generations, :'step', '{
    "id": "b.id * :g + k",
    "first_delivery_id": "b.first_delivery_id * :g + k",
    "idem_key": "b.idem_key || ''~'' || k",
    "first_seen_at": "b.first_seen_at + k * :step::interval",
    "last_seen_at": "b.last_seen_at + k * :step::interval"
  }');
SELECT pg_temp.multiply('dispatches', :generations, :'step', '{
    "event_id": "b.event_id * :g + k",
    "state_changed_at": "b.state_changed_at + k * :step::interval",
    "next_attempt_at": "b.next_attempt_at + k * :step::interval",
    "completed_at": "b.completed_at + k * :step::interval"
  }');
SELECT pg_temp.multiply('attempts', :generations, :'step', '{
    "id": "b.id * :g + k",
    "event_id": "b.event_id * :g + k",
    "started_at": "b.started_at + k * :step::interval",
    "finished_at": "b.finished_at + k * :step::interval",
    "next_attempt_at": "b.next_attempt_at + k * :step::interval"
  }');

SELECT setval('deliveries_id_seq', (SELECT max(id) FROM deliveries)),
       setval('events_id_seq', (SELECT max(id) FROM events)),
       setval('attempts_id_seq', (SELECT max(id) FROM attempts));
-- The rollups are folded anew by `replaysafe seed --deliveries 0`.
DELETE FROM minute_stats;
UPDATE rollup_progress SET last_id = 0;
COMMIT;
