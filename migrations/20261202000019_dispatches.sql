-- Fan-out (issue 18): an event is delivered to each destination of its
-- source that wants it, each with its own state, attempts, retries and
-- dead letter. The forwarding state that lived on `events` moves to one
-- row per (event, destination); `events` keeps what is the event's own:
-- its key, its receipts and its payload. Nothing is written to `events`
-- when an attempt ends: a dispatch row is
-- narrow, and its only full index is its primary key.
CREATE TABLE dispatches (
    event_id         bigint NOT NULL,
    destination      text NOT NULL,            -- a destination's name in its source's config
    source           text NOT NULL,            -- the event's, for leases by source
    state            text NOT NULL
        CHECK (state IN ('queued', 'processing', 'retrying', 'completed', 'dead', 'filtered')),
    forwarder        text NOT NULL DEFAULT 'workers' CHECK (forwarder IN ('workers', 'request')),
    state_changed_at timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    attempt_count    integer NOT NULL DEFAULT 0,
    last_error       text,
    dead_reason      text,
    completed_at     timestamptz,
    forced_by        bigint,
    forced_at        timestamptz,
    forced_reason    text,
    revived_at       timestamptz,
    -- sync mode: the destination's answer, returned byte for byte to duplicates
    response_status       smallint,
    response_content_type text,
    response_body         bytea,
    PRIMARY KEY (event_id, destination)
);

INSERT INTO dispatches (event_id, destination, source, state, forwarder, state_changed_at,
                        next_attempt_at, lease_owner, lease_expires_at, attempt_count,
                        last_error, dead_reason, completed_at, forced_by, forced_at,
                        forced_reason, revived_at, response_status, response_content_type,
                        response_body)
SELECT id, 'default', source, state, forwarder, state_changed_at, next_attempt_at, lease_owner,
       lease_expires_at, attempt_count, last_error, dead_reason, completed_at, forced_by,
       forced_at, forced_reason, revived_at, response_status, response_content_type, response_body
FROM events;

CREATE INDEX dispatches_due ON dispatches (next_attempt_at) WHERE state IN ('queued', 'retrying');
CREATE INDEX dispatches_leased ON dispatches (lease_expires_at) WHERE state = 'processing';
CREATE INDEX dispatches_dead ON dispatches (state_changed_at DESC) INCLUDE (source)
    WHERE state = 'dead';
CREATE INDEX dispatches_request_waiting ON dispatches (state_changed_at)
    WHERE state = 'retrying' AND forwarder = 'request';

ALTER TABLE events
    DROP COLUMN state, DROP COLUMN state_changed_at, DROP COLUMN attempt_count,
    DROP COLUMN next_attempt_at, DROP COLUMN lease_owner, DROP COLUMN lease_expires_at,
    DROP COLUMN last_error, DROP COLUMN dead_reason, DROP COLUMN completed_at,
    DROP COLUMN forced_by, DROP COLUMN forced_at, DROP COLUMN forced_reason,
    DROP COLUMN forwarder, DROP COLUMN revived_at, DROP COLUMN response_status,
    DROP COLUMN response_content_type, DROP COLUMN response_body,
    -- The provider's event type where a destination's filter needed it.
    ADD COLUMN event_type text;

-- Each attempt is one destination's; the ones before fan-out were `default`'s.
ALTER TABLE attempts ADD COLUMN destination text NOT NULL DEFAULT 'default';
DROP INDEX attempts_by_event;
CREATE INDEX attempts_by_event ON attempts (event_id, destination, id);

-- An event's state as one word, from its dispatches' states: dead when any
-- is dead, completed when every one is completed or filtered, else in
-- progress (processing, retrying or queued, the furthest along first).
CREATE FUNCTION event_state(states text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN 'dead' = ANY (states) THEN 'dead'
                WHEN states <@ ARRAY['completed', 'filtered'] THEN 'completed'
                WHEN 'processing' = ANY (states) THEN 'processing'
                WHEN 'retrying' = ANY (states) THEN 'retrying'
                ELSE 'queued' END
$$;

-- Each event's state and its dispatches' figures, for pages and counts.
CREATE VIEW event_states AS
SELECT event_id,
       event_state(array_agg(state)) AS state,
       max(state_changed_at) AS state_changed_at,
       sum(attempt_count)::integer AS attempt_count,
       min(next_attempt_at) FILTER (WHERE state IN ('queued', 'retrying')) AS next_attempt_at,
       CASE WHEN bool_and(state IN ('completed', 'filtered')) THEN max(completed_at) END
           AS completed_at,
       (array_agg(last_error ORDER BY state_changed_at DESC)
            FILTER (WHERE last_error IS NOT NULL))[1] AS last_error,
       (array_agg(dead_reason ORDER BY state_changed_at DESC)
            FILTER (WHERE state = 'dead'))[1] AS dead_reason
FROM dispatches
GROUP BY event_id;

-- Each event as one row, as lists show it: its own columns and its state.
-- OFFSET 0 keeps the state a lookup per event by its id: pulled up into a
-- join, the planner may aggregate every dispatch to show ten events.
CREATE VIEW event_summaries AS
SELECT e.id, e.source, e.idem_key, e.first_seen_at, e.last_seen_at, e.receive_count,
       e.first_delivery_id, e.event_type, s.state, s.state_changed_at, s.attempt_count,
       s.next_attempt_at, s.completed_at, s.last_error, s.dead_reason
FROM events e
JOIN LATERAL (SELECT * FROM event_states es WHERE es.event_id = e.id OFFSET 0) s ON true;
