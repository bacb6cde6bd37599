-- How each person reads the pages (issue 40): the zone their browser
-- reported, whether they read times in it or in UTC, and their theme.
ALTER TABLE users
    ADD COLUMN time_zone text,
    ADD COLUMN clock text NOT NULL DEFAULT 'local' CHECK (clock IN ('local', 'utc')),
    ADD COLUMN theme text NOT NULL DEFAULT 'system' CHECK (theme IN ('system', 'light', 'dark'));
