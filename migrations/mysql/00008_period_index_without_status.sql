-- idx_quota_usage_period loses its status column (issue 11 §1): a finish
-- changes a session's status, so with status in the key every finish
-- delete-marked the row's entry and inserted a new one (and purge removed
-- the old one later). Every query that reads this index (the period totals,
-- the seed snapshot, pool totals, line reservations, the fault checks)
-- names resource_name and period_start_ms and reads table rows for the
-- amounts anyway, so status in the key saved none of them a row read; with
-- (resource_name, period_start_ms) the plans keep the same index and
-- range, and a finish no longer touches it. The index is rebuilt in one
-- ALTER, an online operation in InnoDB (ALGORITHM=INPLACE, LOCK=NONE).

-- +goose Up
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_period,
    ADD KEY idx_quota_usage_period (resource_name, period_start_ms);

-- +goose Down
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_period,
    ADD KEY idx_quota_usage_period (resource_name, period_start_ms, status);
