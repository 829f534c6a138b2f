-- The ledger's lifecycle (issue 23 §2); the same tables as
-- mysql/00009_usage_rollup.sql.

-- +goose Up
CREATE TABLE quota_usage_rollup (
    resource_name   TEXT    NOT NULL,
    hour_ms         INTEGER NOT NULL,
    period_start_ms INTEGER NOT NULL,
    client_id       TEXT    NOT NULL,
    business_line   TEXT    NOT NULL,
    sessions        INTEGER NOT NULL DEFAULT 0,
    leaked          INTEGER NOT NULL DEFAULT 0,
    granted         INTEGER NOT NULL DEFAULT 0,
    charged         INTEGER NOT NULL DEFAULT 0,
    refunded        INTEGER NOT NULL DEFAULT 0,
    overage         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (resource_name, hour_ms, period_start_ms, client_id, business_line)
) STRICT;
CREATE INDEX idx_quota_usage_rollup_period ON quota_usage_rollup (resource_name, period_start_ms);

CREATE TABLE quota_usage_lifecycle (
    resource_name TEXT    NOT NULL PRIMARY KEY,
    rolled_to_ms  INTEGER NOT NULL DEFAULT 0,
    updated_ms    INTEGER NOT NULL DEFAULT 0
) STRICT;

-- +goose Down
DROP TABLE quota_usage_lifecycle;
DROP INDEX idx_quota_usage_rollup_period;
DROP TABLE quota_usage_rollup;
