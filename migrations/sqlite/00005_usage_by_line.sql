-- Usage by business line (issue 10); the same change as mysql/00005_usage_by_line.sql.

-- +goose Up
DROP INDEX idx_quota_usage_start;
CREATE INDEX idx_quota_usage_start ON quota_usage
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount, business_line);

-- +goose Down
DROP INDEX idx_quota_usage_start;
CREATE INDEX idx_quota_usage_start ON quota_usage
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount);
