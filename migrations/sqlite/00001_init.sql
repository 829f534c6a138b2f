-- Initial schema of quota-center for SQLite (tests and single-node runs).
-- Same tables and columns as mysql/00001_init.sql; ENUMs become TEXT with a
-- CHECK. Times are INTEGER Unix milliseconds (UTC).

-- +goose Up
CREATE TABLE quota_policy (
    id                     INTEGER PRIMARY KEY,
    resource_name          TEXT    NOT NULL UNIQUE,
    quota_type             TEXT    NOT NULL CHECK (quota_type IN ('DURATION','COUNT','TOKENS','BANDWIDTH')),
    total_limit            INTEGER NOT NULL,
    reset_cron             TEXT    NOT NULL DEFAULT '',
    timezone               TEXT    NOT NULL DEFAULT 'UTC',
    leak_threshold_seconds INTEGER NOT NULL DEFAULT 300,
    fail_mode              TEXT    NOT NULL DEFAULT 'CLOSED' CHECK (fail_mode IN ('CLOSED','OPEN')),
    created_ms             INTEGER NOT NULL,
    updated_ms             INTEGER NOT NULL
) STRICT;

CREATE TABLE quota_usage (
    id              INTEGER PRIMARY KEY,
    resource_name   TEXT    NOT NULL,
    client_id       TEXT    NOT NULL DEFAULT '',
    session_id      TEXT    NOT NULL UNIQUE,
    period_start_ms INTEGER NOT NULL,
    apply_amount    INTEGER NOT NULL DEFAULT 0,
    min_amount      INTEGER NOT NULL DEFAULT 0,
    granted_amount  INTEGER NOT NULL DEFAULT 0,
    charged_amount  INTEGER NOT NULL DEFAULT 0,
    refunded_amount INTEGER NOT NULL DEFAULT 0,
    overage_amount  INTEGER NOT NULL DEFAULT 0,
    start_ms        INTEGER NOT NULL,
    end_ms          INTEGER NULL,
    status          TEXT    NOT NULL CHECK (status IN ('USING','FINISHED','LEAKED')),
    leak_recovered  INTEGER NOT NULL DEFAULT 0 CHECK (leak_recovered IN (0, 1)),
    pool            TEXT    NOT NULL DEFAULT '',
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
) STRICT;

CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms, status);
CREATE INDEX idx_quota_usage_open ON quota_usage (status, resource_name);

-- +goose Down
DROP INDEX idx_quota_usage_open;
DROP INDEX idx_quota_usage_period;
DROP TABLE quota_usage;
DROP TABLE quota_policy;
