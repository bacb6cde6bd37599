-- The replay guard (spec section 9): for providers whose signature covers
-- neither the key nor a timestamp, the digest of each event's signed
-- content, claimed in the same transaction as its key, so that a captured
-- request re-posted under a fresh id finds the event it repeats. Kept as
-- long as that event's key (retention prunes both).
CREATE TABLE signed_content (
    source        text NOT NULL,
    digest        bytea NOT NULL,
    idem_key      text NOT NULL,               -- the key of the event it signed
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, digest)
);
