-- The sign-in throttle's own table, so the audit log is append-only
-- (retention aside): the throttle wrote a `checking` audit row per
-- attempt and settled it, and counted refusals into a row's detail.
-- Attempts are counted by the client address's bucket (a /64 for IPv6).
CREATE TABLE sign_in_attempts (
    id         bigserial PRIMARY KEY,
    bucket     text NOT NULL,
    username   text NOT NULL,              -- lowercased
    state      text NOT NULL CHECK (state IN ('checking', 'failed', 'refused')),
    -- An unlock of the username (`replaysafe user unlock --username`)
    -- leaves its failures counting against the address only.
    counts_for_user boolean NOT NULL DEFAULT true,
    -- A `refused` row counts the window's refusals of its bucket.
    refused    bigint NOT NULL DEFAULT 0,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sign_in_attempts_by_bucket ON sign_in_attempts (bucket, at);
CREATE INDEX sign_in_attempts_by_username ON sign_in_attempts (username)
    WHERE counts_for_user;

-- The audit log takes new rows and loses old ones to retention; a row is
-- never changed (a deleted user's or token's id may only become NULL).
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.at, NEW.username, NEW.action, NEW.target, NEW.outcome, NEW.detail,
        NEW.remote_addr)
       IS DISTINCT FROM
       (OLD.id, OLD.at, OLD.username, OLD.action, OLD.target, OLD.outcome, OLD.detail,
        OLD.remote_addr)
       OR (NEW.user_id IS NOT NULL AND NEW.user_id IS DISTINCT FROM OLD.user_id)
       OR (NEW.token_id IS NOT NULL AND NEW.token_id IS DISTINCT FROM OLD.token_id) THEN
        RAISE EXCEPTION 'the audit log is append-only: row % is not changed', OLD.id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
