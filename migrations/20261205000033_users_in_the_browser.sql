-- Users managed in the browser (issue 40): an account an admin made, or
-- whose password an admin reset, signs in with a one-time password and
-- must choose its own before anything else.
ALTER TABLE users ADD COLUMN must_change_password boolean NOT NULL DEFAULT false;
