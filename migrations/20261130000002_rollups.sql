-- Per-minute figures for the dashboard (issue 5), so that no page view scans
-- deliveries or attempts. A background job folds new rows in (rollup.rs).

-- Where each attempt left its event: 'completed', 'retrying' or 'dead'.
ALTER TABLE attempts ADD COLUMN result text
    CHECK (result IN ('completed', 'retrying', 'dead'));
-- The rollup folds attempts in once every attempt below a point has finished.
CREATE INDEX attempts_open ON attempts (id) WHERE finished_at IS NULL;

CREATE TABLE minute_stats (
    source            text NOT NULL,
    minute            timestamptz NOT NULL,
    deliveries        integer NOT NULL DEFAULT 0,
    claimed           integer NOT NULL DEFAULT 0,
    completed         integer NOT NULL DEFAULT 0,  -- duplicates of completed events
    in_progress       integer NOT NULL DEFAULT 0,
    dead              integer NOT NULL DEFAULT 0,  -- duplicates of dead-lettered events
    rejected          integer NOT NULL DEFAULT 0,
    bad_signature     integer NOT NULL DEFAULT 0,  -- rejections answered 401
    redeliveries      integer NOT NULL DEFAULT 0,
    ack_hist          integer[] NOT NULL,          -- counts per rollup::LATENCY_BOUNDS_MS bucket
    first_delivery_id bigint,                      -- maps time ranges to id ranges
    last_delivery_id  bigint,
    attempts          integer NOT NULL DEFAULT 0,
    attempts_failed   integer NOT NULL DEFAULT 0,
    events_completed  integer NOT NULL DEFAULT 0,
    events_dead       integer NOT NULL DEFAULT 0,
    e2e_hist          integer[] NOT NULL,          -- first receipt to completion
    PRIMARY KEY (source, minute)
);
CREATE INDEX minute_stats_by_minute ON minute_stats (minute);

-- How far each table has been folded in. `pending_*` is the highest id seen
-- at `pending_at`: deliveries are folded in only up to an id seen a few
-- seconds ago, so a statement that took its id earlier has committed by then.
CREATE TABLE rollup_progress (
    name       text PRIMARY KEY CHECK (name IN ('deliveries', 'attempts')),
    last_id    bigint NOT NULL DEFAULT 0,
    pending_id bigint NOT NULL DEFAULT 0,
    pending_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO rollup_progress (name) VALUES ('deliveries'), ('attempts');

-- Element-wise sum of two histograms (NULL counts as empty).
CREATE FUNCTION histogram_add(a integer[], b integer[]) RETURNS integer[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i)
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

-- A histogram of `size` buckets from (1-based bucket, count) pairs.
CREATE FUNCTION histogram_of(buckets integer[], counts bigint[], size integer) RETURNS integer[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT array_agg(coalesce((SELECT sum(c)::integer FROM unnest(buckets, counts) AS u(b, c)
                               WHERE b = i), 0) ORDER BY i)
    FROM generate_series(1, size) AS i
$$;
