-- Usernames sign in case-blind (lower(username) = lower($1)), so two that
-- differ only in case would make one of them unable to sign in: one name
-- in any case (issue 40's review). Refused, naming them, if such pairs exist.
DO $$
DECLARE clash text;
BEGIN
    SELECT string_agg(username, ', ') INTO clash
    FROM users WHERE lower(username) IN
        (SELECT lower(username) FROM users GROUP BY 1 HAVING count(*) > 1);
    IF clash IS NOT NULL THEN
        RAISE EXCEPTION 'users whose names differ only in case: %; rename or remove one of each (replaysafe user disable, or SQL) and start again', clash;
    END IF;
END $$;
CREATE UNIQUE INDEX users_username_lower ON users (lower(username));
