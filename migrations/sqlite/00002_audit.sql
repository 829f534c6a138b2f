-- The audit log of admin changes; same columns as mysql/00002_audit.sql.
-- INTEGER PRIMARY KEY AUTOINCREMENT: ids are never reused, so "before=<id>"
-- pages stay stable.

-- +goose Up
CREATE TABLE quota_audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms         INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    action        TEXT    NOT NULL,
    resource_name TEXT    NOT NULL DEFAULT '',
    before_json   TEXT    NULL,
    after_json    TEXT    NULL
) STRICT;

CREATE INDEX idx_quota_audit_resource ON quota_audit (resource_name, id);

-- +goose Down
DROP INDEX idx_quota_audit_resource;
DROP TABLE quota_audit;
