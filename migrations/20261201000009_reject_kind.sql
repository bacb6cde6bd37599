-- What a rejection was about (receiver::providers::RejectKind). A timestamp
-- rejection guards against captured replays: only an admin, with a typed
-- reason, re-delivers one (issue 13).
ALTER TABLE deliveries ADD COLUMN reject_kind text
    CHECK (reject_kind IN ('signature', 'timestamp', 'key', 'size'));
