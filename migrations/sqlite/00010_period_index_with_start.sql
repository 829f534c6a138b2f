-- idx_quota_usage_period gains start_ms, as in the MySQL migration of the
-- same number: the period totals read a period's rows from the lifecycle
-- watermark on, a range of (resource_name, period_start_ms, start_ms).

-- +goose Up
DROP INDEX idx_quota_usage_period;
CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms, start_ms);

-- +goose Down
DROP INDEX idx_quota_usage_period;
CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms);
