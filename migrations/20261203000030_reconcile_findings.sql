-- What reconciliation found missing, one row per source and key, however
-- many runs see it: the Reconciliation view's list, GitHub's redelivery
-- requests between runs (a key is asked for a bounded number of times), and
-- the missed-events count.
CREATE TABLE reconcile_findings (
    source              text NOT NULL,
    idem_key            text NOT NULL,
    event_type          text,
    first_run_id        bigint NOT NULL,
    last_run_id         bigint NOT NULL,
    found_at            timestamptz NOT NULL DEFAULT now(),
    -- the last run that found it: retention keeps what runs still find
    last_found_at       timestamptz NOT NULL DEFAULT now(),
    -- 'recovered' (claimed from the provider's list), 'redelivery_requested'
    -- (GitHub asked to send it again), 'missing' (and missing_why says why)
    verdict             text NOT NULL
        CHECK (verdict IN ('recovered', 'redelivery_requested', 'missing')),
    missing_why         text
        CHECK (missing_why IN ('dry_run', 'refused', 'given_up', 'not_tried', 'unkeyed', 'waiting')),
    redelivery_requests integer NOT NULL DEFAULT 0,
    last_requested_at   timestamptz,
    PRIMARY KEY (source, idem_key)
);
CREATE INDEX reconcile_findings_recent ON reconcile_findings (source, found_at DESC);

-- Keys a provider had that replaysafe had not, counted once each, per source:
-- replaysafe_reconcile_missed_total and the missed_events rule read it (it
-- outlives the findings retention prunes).
CREATE TABLE reconcile_totals (
    source  text PRIMARY KEY,
    missed  bigint NOT NULL DEFAULT 0
);
