-- Incidents (issue 40): failing attempts grouped by source, destination,
-- failure kind (the status, or the transport error's kind) and the first line
-- of the answer with numbers, hex strings and UUIDs replaced. A background
-- job folds finished attempts in (jobs/rollup.rs, progress row 'incidents');
-- core/src/incidents.rs alone moves an incident between states.
CREATE TABLE incidents (
    id               bigserial PRIMARY KEY,
    source           text NOT NULL,
    destination      text NOT NULL,
    kind             text NOT NULL,
    fingerprint      text NOT NULL,
    state            text NOT NULL DEFAULT 'open'
                     CHECK (state IN ('open', 'acknowledged', 'resolved', 'ignored')),
    failures         bigint NOT NULL DEFAULT 0,
    affected_events  bigint NOT NULL DEFAULT 0,
    first_seen_at    timestamptz NOT NULL,
    last_seen_at     timestamptz NOT NULL,
    -- The destination's latest 2xx the fold saw after this incident opened.
    last_success_at  timestamptz,
    sample_event_id  bigint,
    sample_status    smallint,
    sample_response  text,
    state_changed_at timestamptz NOT NULL DEFAULT now(),
    -- Who moved it last (NULL with state 'resolved': it resolved by itself).
    state_changed_by text
);
-- One live incident per group: a failure of a resolved one's kind opens a new one.
CREATE UNIQUE INDEX incidents_live ON incidents (source, destination, kind, fingerprint)
    WHERE state <> 'resolved';
CREATE INDEX incidents_newest ON incidents (last_seen_at DESC, id DESC);

CREATE TABLE incident_events (
    incident_id bigint NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    event_id    bigint NOT NULL,
    PRIMARY KEY (incident_id, event_id)
);

ALTER TABLE rollup_progress DROP CONSTRAINT rollup_progress_name_check,
    ADD CONSTRAINT rollup_progress_name_check CHECK (name IN ('deliveries', 'attempts', 'incidents'));
-- Grouping starts with the attempts that finish from now on: an upgrade does
-- not open incidents for failures long past.
INSERT INTO rollup_progress (name, last_id)
SELECT 'incidents', coalesce((SELECT max(id) FROM attempts), 0);
