-- idx_quota_usage_period loses its status column, as in the MySQL migration
-- of the same number: a finish changes status, and no query that reads the
-- index needs it in the key.

-- +goose Up
DROP INDEX idx_quota_usage_period;
CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms);

-- +goose Down
DROP INDEX idx_quota_usage_period;
CREATE INDEX idx_quota_usage_period ON quota_usage (resource_name, period_start_ms, status);
