-- A ledger row can be CANCELLED; the same change as mysql/00006_cancelled.sql
-- (see there). SQLite cannot change a CHECK constraint in place: the table is
-- rebuilt with the same columns, rows and indexes.

-- +goose Up
CREATE TABLE quota_usage_new (
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
    status          TEXT    NOT NULL CHECK (status IN ('USING','FINISHED','LEAKED','CANCELLED')),
    leak_recovered  INTEGER NOT NULL DEFAULT 0 CHECK (leak_recovered IN (0, 1)),
    pool            TEXT    NOT NULL DEFAULT '',
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    business_line   TEXT    NOT NULL DEFAULT '',
    drawn_dedicated INTEGER NOT NULL DEFAULT 0,
    drawn_shared    INTEGER NOT NULL DEFAULT 0,
    drawn_buffer    INTEGER NOT NULL DEFAULT 0,
    drawn_grant     INTEGER NOT NULL DEFAULT 0,
    drawn_grants    TEXT    NOT NULL DEFAULT ''
) STRICT;
INSERT INTO quota_usage_new (id, resource_name, client_id, session_id, period_start_ms, apply_amount, min_amount,
    granted_amount, charged_amount, refunded_amount, overage_amount, start_ms, end_ms, status,
    leak_recovered, pool, created_at, business_line, drawn_dedicated, drawn_shared, drawn_buffer,
    drawn_grant, drawn_grants)
SELECT id, resource_name, client_id, session_id, period_start_ms, apply_amount, min_amount,
    granted_amount, charged_amount, refunded_amount, overage_amount, start_ms, end_ms, status,
    leak_recovered, pool, created_at, business_line, drawn_dedicated, drawn_shared, drawn_buffer,
    drawn_grant, drawn_grants
FROM quota_usage;
DROP TABLE quota_usage;
ALTER TABLE quota_usage_new RENAME TO quota_usage;
CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms, status);
CREATE INDEX idx_quota_usage_open ON quota_usage (status, resource_name);
CREATE INDEX idx_quota_usage_start ON quota_usage
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount, business_line);

-- +goose Down
UPDATE quota_usage SET status = 'FINISHED' WHERE status = 'CANCELLED';
CREATE TABLE quota_usage_new (
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
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    business_line   TEXT    NOT NULL DEFAULT '',
    drawn_dedicated INTEGER NOT NULL DEFAULT 0,
    drawn_shared    INTEGER NOT NULL DEFAULT 0,
    drawn_buffer    INTEGER NOT NULL DEFAULT 0,
    drawn_grant     INTEGER NOT NULL DEFAULT 0,
    drawn_grants    TEXT    NOT NULL DEFAULT ''
) STRICT;
INSERT INTO quota_usage_new (id, resource_name, client_id, session_id, period_start_ms, apply_amount, min_amount,
    granted_amount, charged_amount, refunded_amount, overage_amount, start_ms, end_ms, status,
    leak_recovered, pool, created_at, business_line, drawn_dedicated, drawn_shared, drawn_buffer,
    drawn_grant, drawn_grants)
SELECT id, resource_name, client_id, session_id, period_start_ms, apply_amount, min_amount,
    granted_amount, charged_amount, refunded_amount, overage_amount, start_ms, end_ms, status,
    leak_recovered, pool, created_at, business_line, drawn_dedicated, drawn_shared, drawn_buffer,
    drawn_grant, drawn_grants
FROM quota_usage;
DROP TABLE quota_usage;
ALTER TABLE quota_usage_new RENAME TO quota_usage;
CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms, status);
CREATE INDEX idx_quota_usage_open ON quota_usage (status, resource_name);
CREATE INDEX idx_quota_usage_start ON quota_usage
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount, business_line);
