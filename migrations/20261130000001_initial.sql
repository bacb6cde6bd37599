-- replaysafe's schema for the whole product contract (spec sections 1-8).
-- Deliveries are stored and never changed (retention aside); events are both
-- the dedup claim, through the unique (source, idem_key), and the work queue.

CREATE TABLE users (
    id            bigserial PRIMARY KEY,
    username      text NOT NULL UNIQUE,
    password_hash text NOT NULL,            -- argon2id PHC string, never a password
    role          text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_login_at timestamptz
);

-- Runtime state of configured sources. The config file is the truth for
-- settings and secrets (secrets are never stored here); the database holds what
-- operators change at runtime, such as pause, which wins over the config.
CREATE TABLE sources (
    slug              text PRIMARY KEY,
    provider          text NOT NULL,
    mode              text NOT NULL CHECK (mode IN ('ack', 'sync')),
    destination       text,
    attempt_timeout_secs integer NOT NULL DEFAULT 10,  -- sizes the workers' lease
    config_paused     boolean NOT NULL DEFAULT false,
    paused_override   boolean,                 -- NULL: follow config_paused
    paused_changed_at timestamptz,
    paused_changed_by bigint REFERENCES users (id) ON DELETE SET NULL,
    in_config         boolean NOT NULL DEFAULT true,
    synced_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE events (
    id                    bigserial PRIMARY KEY,
    source                text NOT NULL,           -- a sources.slug (see below: no foreign key)
    idem_key              text NOT NULL,
    state                 text NOT NULL
        CHECK (state IN ('queued', 'processing', 'retrying', 'completed', 'dead')),
    state_changed_at      timestamptz NOT NULL DEFAULT now(),
    first_seen_at         timestamptz NOT NULL DEFAULT now(),
    last_seen_at          timestamptz NOT NULL DEFAULT now(),
    receive_count         integer NOT NULL DEFAULT 1,
    first_delivery_id     bigint,              -- the delivery whose body is forwarded
    attempt_count         integer NOT NULL DEFAULT 0,
    next_attempt_at       timestamptz NOT NULL DEFAULT now(),
    lease_owner           text,
    lease_expires_at      timestamptz,
    last_error            text,
    dead_reason           text,
    completed_at          timestamptz,
    -- sync mode: the destination's answer, returned byte for byte to duplicates
    response_status       smallint,
    response_content_type text,
    response_body         bytea,
    CONSTRAINT events_claim UNIQUE (source, idem_key)
);
-- Every index here costs each claim an insert: keep to what pages and the queue need.
-- Retention walks the primary key (ids grow with time) instead of a time index.
CREATE INDEX events_due ON events (next_attempt_at) WHERE state IN ('queued', 'retrying');
CREATE INDEX events_leased ON events (lease_expires_at) WHERE state = 'processing';
CREATE INDEX events_dead ON events (state_changed_at DESC) WHERE state = 'dead';

CREATE TABLE deliveries (
    id             bigserial PRIMARY KEY,
    source         text NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    event_id       bigint,                     -- the event holding its key; NULL when rejected
    idem_key       text,
    outcome        text NOT NULL
        CHECK (outcome IN ('claimed', 'completed', 'in_progress', 'dead', 'rejected', 'unavailable')),
    reject_reason  text,
    http_status    smallint NOT NULL,
    ack_micros     integer,
    verified       boolean NOT NULL,
    verification   text,                       -- what matched or why not; never secret material
    method         text NOT NULL DEFAULT 'POST',
    query          text,
    content_type   text,
    headers        jsonb NOT NULL,             -- secrets (Authorization, Cookie, ...) redacted
    body           bytea,                      -- NULL once retention prunes the payload
    body_size      integer NOT NULL,
    remote_addr    text,
    redelivery_of  bigint REFERENCES deliveries (id) ON DELETE SET NULL,
    redelivered_by bigint REFERENCES users (id) ON DELETE SET NULL
);
-- Newest first is the primary key; a key is found through its event
-- (events_claim) and then deliveries_by_event. Claims, the common outcome,
-- stay out of the outcome index: scanning newest first finds them at once.
CREATE INDEX deliveries_by_source ON deliveries (source, id DESC);
CREATE INDEX deliveries_by_event ON deliveries (event_id);
CREATE INDEX deliveries_unusual ON deliveries (outcome, id DESC) WHERE outcome <> 'claimed';

-- No foreign keys on the claim's hot path (events.source, deliveries.source,
-- deliveries.event_id, events.first_delivery_id): each would lock the parent
-- row FOR KEY SHARE on every delivery, and every delivery of a source shares
-- one sources row, so concurrent claims pile up multixacts on it. The code
-- writes these references in the claim statement itself; retention deletes
-- payloads before keys, and readers join with LEFT JOIN.

CREATE TABLE attempts (
    id               bigserial PRIMARY KEY,
    event_id         bigint NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    number           integer NOT NULL,
    worker           text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    status           smallint,
    latency_ms       integer,
    response_excerpt text,
    error            text,
    next_attempt_at  timestamptz,              -- when a retry was scheduled
    forced_by        bigint REFERENCES users (id) ON DELETE SET NULL
);
CREATE INDEX attempts_by_event ON attempts (event_id, id);
CREATE INDEX attempts_by_time ON attempts (started_at);

CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    user_id     bigint REFERENCES users (id) ON DELETE SET NULL,
    username    text,                          -- kept for failed logins of unknown names
    action      text NOT NULL,
    target      text,
    outcome     text NOT NULL,
    detail      jsonb,
    remote_addr text
);
CREATE INDEX audit_log_by_time ON audit_log (at DESC);
