-- The audit log of admin changes: who (actor, the admin token's name), what
-- (action on resource_name), when (at_ms, Unix milliseconds UTC) and the
-- object before and after as JSON (before_json NULL on create).
-- (resource_name, id) serves GET /admin/audit?resource=…, newest first.

-- +goose Up
CREATE TABLE quota_audit (
    id            BIGINT      NOT NULL AUTO_INCREMENT,
    at_ms         BIGINT      NOT NULL,
    actor         VARCHAR(64) NOT NULL,
    action        VARCHAR(64) NOT NULL,
    resource_name VARCHAR(64) NOT NULL DEFAULT '',
    before_json   TEXT        NULL,
    after_json    TEXT        NULL,
    PRIMARY KEY (id),
    KEY idx_quota_audit_resource (resource_name, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE quota_audit;
