-- Operators' surface (issue 10); the same changes as mysql/00004_operator.sql.

-- +goose Up
CREATE INDEX idx_quota_usage_start ON quota_usage
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount);
ALTER TABLE quota_policy ADD COLUMN period_anchor_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE quota_audit ADD COLUMN reason TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE quota_audit DROP COLUMN reason;
ALTER TABLE quota_policy DROP COLUMN period_anchor_ms;
DROP INDEX idx_quota_usage_start;
