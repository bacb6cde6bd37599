-- Reconciliation (issue 34): what each run asked a provider, what it found,
-- and where a recovered event came from.
CREATE TABLE reconcile_runs (
    id                   bigserial PRIMARY KEY,
    source               text NOT NULL,
    -- 'schedule', or who asked (an operator, a token), as the audit log names them
    started_by           text NOT NULL,
    dry_run              boolean NOT NULL DEFAULT false,
    window_from          timestamptz NOT NULL,
    window_to            timestamptz NOT NULL,
    started_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    pages                integer NOT NULL DEFAULT 0,
    seen                 bigint NOT NULL DEFAULT 0,
    already_received     bigint NOT NULL DEFAULT 0,
    recovered            bigint NOT NULL DEFAULT 0,
    redelivery_requested bigint NOT NULL DEFAULT 0,
    still_missing        bigint NOT NULL DEFAULT 0,
    provider_failed_we_completed bigint NOT NULL DEFAULT 0,
    error                text
);
CREATE INDEX reconcile_runs_by_source ON reconcile_runs (source, id DESC);

-- A recovered event's delivery: the run that claimed it from the provider's
-- list, and the request that listed it (never a credential).
ALTER TABLE deliveries ADD COLUMN reconcile_run_id bigint, ADD COLUMN recovered_from text;
