-- A session ends when its user's password changes (issue 35): the epoch a
-- session signed in at is compared with the user's on every request, and
-- every password change moves it on.
ALTER TABLE users ADD COLUMN password_epoch integer NOT NULL DEFAULT 0;
