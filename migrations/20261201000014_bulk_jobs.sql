-- Bulk re-delivery as a job (issue 16): an operator's "re-deliver every
-- dead event matching this filter" runs on the server, a step at a time,
-- whoever started it and from wherever; any process shows its progress and
-- its per-event outcomes, and an operator may cancel it between steps.
--
-- state: queued (no runner yet), running (owner renews heartbeat_at; a
-- runner takes over one whose heartbeat went stale), then done, cancelled
-- or failed (its caller lost the right, say a revoked token). Each move is
-- guarded by the state it leaves (app::api::jobs::ssr owns them). A running
-- job asked to stop (cancelled_by set) is cancelled by its runner between
-- steps, so "cancelled" means no step of it is under way.
CREATE TABLE bulk_jobs (
    id           bigserial PRIMARY KEY,
    filter       jsonb NOT NULL,
    -- The dead events it takes: those matching at start, by id, up to this.
    up_to        bigint NOT NULL,
    -- Who started it; each step runs as them, checked again each time.
    user_id      bigint REFERENCES users (id) ON DELETE SET NULL,
    token_id     bigint REFERENCES api_tokens (id) ON DELETE SET NULL,
    started_by   text NOT NULL,
    remote_addr  text,
    state        text NOT NULL DEFAULT 'queued'
                 CHECK (state IN ('queued', 'running', 'done', 'cancelled', 'failed')),
    -- Events up to this id were taken.
    cursor       bigint NOT NULL DEFAULT 0,
    total        bigint NOT NULL,
    done         bigint NOT NULL DEFAULT 0,
    requeued     bigint NOT NULL DEFAULT 0,
    owner        text,
    heartbeat_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    cancelled_by text,
    error        text,
    CHECK ((user_id IS NULL) OR (token_id IS NULL))
);
CREATE INDEX bulk_jobs_unfinished ON bulk_jobs (id) WHERE state IN ('queued', 'running');

-- One row per event a job takes: 'pending' from the moment a step chooses
-- it, then the dedup layer's answer (the first answer stays). A runner that
-- dies between a step's re-deliveries and their record leaves its rows
-- pending to the next owner; a claimed delivery of the event carrying the
-- job's id (deliveries.bulk_job_id) says an earlier try queued it again.
CREATE TABLE bulk_job_results (
    job_id        bigint NOT NULL REFERENCES bulk_jobs (id) ON DELETE CASCADE,
    event_id      bigint NOT NULL,
    idem_key      text,
    redelivered   bigint,
    delivery_id   bigint,
    outcome       text NOT NULL DEFAULT 'pending',
    requeued      boolean NOT NULL DEFAULT false,
    message       text NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, event_id)
);
CREATE INDEX bulk_job_results_pending ON bulk_job_results (job_id) WHERE outcome = 'pending';

-- The job a re-delivery was made by: a job revives an event at most once
-- (events::revive), however many of its runners try.
ALTER TABLE deliveries ADD COLUMN bulk_job_id bigint;
