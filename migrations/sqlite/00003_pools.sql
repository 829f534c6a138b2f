-- Business lines, pools and temporary grants: the tables and columns of
-- mysql/00003_pools.sql (see there), for SQLite.

-- +goose Up
CREATE TABLE quota_pool_settings (
    resource_name             TEXT    NOT NULL PRIMARY KEY,
    shared_percent            INTEGER NOT NULL,
    dedicated_percent         INTEGER NOT NULL,
    buffer_percent            INTEGER NOT NULL,
    borrow_limit_percent      INTEGER NOT NULL,
    elasticity                TEXT    NOT NULL DEFAULT 'AUTO' CHECK (elasticity IN ('AUTO','PREDICTIVE','REACTIVE','OFF')),
    reclaim_threshold_percent INTEGER NOT NULL DEFAULT 90,
    reclaim_confirm_seconds   INTEGER NOT NULL DEFAULT 30,
    reclaim_dry_run           INTEGER NOT NULL DEFAULT 0 CHECK (reclaim_dry_run IN (0, 1)),
    updated_ms                INTEGER NOT NULL
) STRICT;

CREATE TABLE quota_line (
    resource_name TEXT    NOT NULL,
    line          TEXT    NOT NULL,
    tier          TEXT    NOT NULL CHECK (tier IN ('CORE','GROWTH','EXPLORE')),
    weight        INTEGER NOT NULL DEFAULT 0,
    dedicated     INTEGER NOT NULL DEFAULT 0,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    PRIMARY KEY (resource_name, line)
) STRICT;

CREATE TABLE quota_grant (
    id            TEXT    NOT NULL PRIMARY KEY,
    resource_name TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('GRANT','RELEASE')),
    line          TEXT    NOT NULL DEFAULT '',
    amount        INTEGER NOT NULL,
    effective_ms  INTEGER NOT NULL,
    expires_ms    INTEGER NOT NULL,
    reason        TEXT    NOT NULL DEFAULT '',
    voided_ms     INTEGER NULL,
    created_ms    INTEGER NOT NULL
) STRICT;
CREATE INDEX idx_quota_grant_resource ON quota_grant (resource_name, expires_ms);

CREATE TABLE quota_pool_event (
    id            INTEGER PRIMARY KEY,
    resource_name TEXT    NOT NULL,
    at_ms         INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    line          TEXT    NOT NULL DEFAULT '',
    amount        INTEGER NOT NULL DEFAULT 0,
    reason        TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX idx_quota_pool_event_resource ON quota_pool_event (resource_name, id);

CREATE TABLE quota_reclaim (
    id            TEXT    NOT NULL PRIMARY KEY,
    resource_name TEXT    NOT NULL,
    from_line     TEXT    NOT NULL,
    to_line       TEXT    NOT NULL,
    amount        INTEGER NOT NULL,
    state         TEXT    NOT NULL CHECK (state IN ('WARNED','CONFIRMED','EXECUTED','CANCELLED','RETURNED')),
    dry_run       INTEGER NOT NULL DEFAULT 0 CHECK (dry_run IN (0, 1)),
    warned_ms     INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    reason        TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX idx_quota_reclaim_resource ON quota_reclaim (resource_name, warned_ms);

ALTER TABLE quota_usage ADD COLUMN business_line TEXT NOT NULL DEFAULT '';
ALTER TABLE quota_usage ADD COLUMN drawn_dedicated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE quota_usage ADD COLUMN drawn_shared INTEGER NOT NULL DEFAULT 0;
ALTER TABLE quota_usage ADD COLUMN drawn_buffer INTEGER NOT NULL DEFAULT 0;
ALTER TABLE quota_usage ADD COLUMN drawn_grant INTEGER NOT NULL DEFAULT 0;
ALTER TABLE quota_usage ADD COLUMN drawn_grants TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE quota_usage DROP COLUMN drawn_grants;
ALTER TABLE quota_usage DROP COLUMN drawn_grant;
ALTER TABLE quota_usage DROP COLUMN drawn_buffer;
ALTER TABLE quota_usage DROP COLUMN drawn_shared;
ALTER TABLE quota_usage DROP COLUMN drawn_dedicated;
ALTER TABLE quota_usage DROP COLUMN business_line;
DROP INDEX idx_quota_reclaim_resource;
DROP TABLE quota_reclaim;
DROP INDEX idx_quota_pool_event_resource;
DROP TABLE quota_pool_event;
DROP INDEX idx_quota_grant_resource;
DROP TABLE quota_grant;
DROP TABLE quota_line;
DROP TABLE quota_pool_settings;
