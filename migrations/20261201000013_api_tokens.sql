-- API tokens (issue 16): scripts and tools call /api/v1 with one. Only a
-- SHA-256 of the token is kept: a token is 40 random base62 characters
-- (about 238 bits), so a fast hash cannot be searched back to it, and the
-- lookup is one index probe. `prefix` (its first characters) is what lists
-- show, so an operator can tell tokens apart without seeing one.
CREATE TABLE api_tokens (
    id           bigserial PRIMARY KEY,
    name         text NOT NULL,
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    prefix       text NOT NULL,
    hash         bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text,
    last_used_at timestamptz,
    expires_at   timestamptz,
    revoked_at   timestamptz
);
-- A name names one live token; a revoked one's name may be given again.
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;

-- What a token did is audit-logged under its name, like a person's action;
-- token_id tells the two apart (a token may share a person's name).
ALTER TABLE audit_log ADD COLUMN token_id bigint REFERENCES api_tokens (id) ON DELETE SET NULL;
