-- Circuit breakers (issue 18): a destination that keeps failing is left
-- alone for a cool-down that grows while it stays broken, then one attempt
-- probes it. Its state is shared by every process, on its gate row.
ALTER TABLE destination_gates
    ALTER COLUMN allowance SET DEFAULT 0,
    ALTER COLUMN refilled_at SET DEFAULT now(),
    ADD COLUMN breaker text NOT NULL DEFAULT 'closed'
        CHECK (breaker IN ('closed', 'open', 'half_open')),
    -- Failed attempts since the last success.
    ADD COLUMN failures integer NOT NULL DEFAULT 0,
    -- The current window's attempts and failures, for a failure ratio.
    ADD COLUMN window_started_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN window_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN window_failures integer NOT NULL DEFAULT 0,
    -- While open: the cool-down it is in, and when one probe may go.
    ADD COLUMN cooldown_secs float8 NOT NULL DEFAULT 0,
    ADD COLUMN retry_at timestamptz,
    ADD COLUMN breaker_changed_at timestamptz NOT NULL DEFAULT now(),
    -- Opened by an operator: only an operator closes it.
    ADD COLUMN opened_by_hand boolean NOT NULL DEFAULT false;
