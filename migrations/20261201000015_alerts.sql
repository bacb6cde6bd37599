-- Alerts (issue 17): each rule that holds for a source is an alert with a
-- lifecycle, firing then resolved, kept by one evaluator at a time (an
-- advisory lock per evaluation), so several processes fire it once.
CREATE TABLE alerts (
    id           bigserial PRIMARY KEY,
    rule         text NOT NULL,
    source       text NOT NULL,
    state        text NOT NULL DEFAULT 'firing' CHECK (state IN ('firing', 'resolved')),
    started_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at  timestamptz,
    -- The figures and sentence when it fired (and last seen firing).
    summary      text NOT NULL,
    figures      jsonb NOT NULL,
    link         text NOT NULL,
    -- When it was last sent (fired or repeated).
    last_sent_at timestamptz NOT NULL DEFAULT now()
);
-- One firing alert per rule and source.
CREATE UNIQUE INDEX alerts_firing ON alerts (rule, source) WHERE state = 'firing';
CREATE INDEX alerts_recent ON alerts (started_at DESC);

-- What each channel is to be sent, written in the same transaction as the
-- alert's transition, then sent with retries by whichever process leases
-- it, in order per alert and channel. At least once: a process that dies
-- between sending and recording it leaves it to be sent again (a webhook's
-- stable webhook-id lets its receiver drop the copy).
CREATE TABLE alert_notifications (
    id              bigserial PRIMARY KEY,
    alert_id        bigint REFERENCES alerts (id) ON DELETE CASCADE,
    channel         text NOT NULL,
    -- firing, resolved or repeat
    kind            text NOT NULL,
    -- The alert as it was when this was queued (a late retry tells of its
    -- own transition).
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    leased_until    timestamptz,
    sent_at         timestamptz,
    failed_at       timestamptz,
    last_error      text
);
CREATE INDEX alert_notifications_due ON alert_notifications (next_attempt_at)
    WHERE sent_at IS NULL AND failed_at IS NULL;
CREATE INDEX alert_notifications_of_alert ON alert_notifications (alert_id, channel, id);

-- An admin's silence of a rule, for one source or all (NULL), until a time:
-- its alerts still fire and resolve, but are not sent meanwhile.
CREATE TABLE alert_silences (
    id         bigserial PRIMARY KEY,
    rule       text NOT NULL,
    source     text,
    until      timestamptz NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    reason     text NOT NULL
);
CREATE INDEX alert_silences_in_force ON alert_silences (rule, until);
