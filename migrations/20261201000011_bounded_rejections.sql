-- Issue 15: what a stranger's rejected request may leave behind is bounded.
-- A rejected delivery keeps an excerpt of its body, headers and query
-- (`truncated` says something was cut) and the SHA-256 of the whole body.
ALTER TABLE deliveries
    ADD COLUMN truncated boolean NOT NULL DEFAULT false,
    ADD COLUMN body_sha256 bytea;
ALTER TABLE deliveries ALTER COLUMN body_sha256 SET STATISTICS 0;

-- Rejections beyond an address's recording rate are counted here, a row per
-- source, address and minute, instead of each being recorded.
CREATE TABLE unrecorded_rejections (
    minute      timestamptz NOT NULL,
    source      text NOT NULL,
    remote_addr text NOT NULL,
    count       bigint NOT NULL,
    PRIMARY KEY (minute, source, remote_addr)
);
