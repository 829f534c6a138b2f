-- The start index without the amounts; the same change as mysql/00008_narrow_start_index.sql.

-- +goose Up
DROP INDEX idx_quota_usage_start;
CREATE INDEX idx_quota_usage_start ON quota_usage (resource_name, start_ms, id);

-- +goose Down
DROP INDEX idx_quota_usage_start;
CREATE INDEX idx_quota_usage_start ON quota_usage
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount, business_line);
