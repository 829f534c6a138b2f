-- idx_quota_usage_period gains start_ms (issue 23 §2 (b)): the period totals
-- of a rebuild, reconciliation and the seed snapshot read the raw rows of a
-- period that started at or after the resource's lifecycle watermark
-- (periodTotalsSQL, internal/mysqlstore/ledger.go). With
-- (resource_name, period_start_ms) the watermark was a filter on the table
-- rows already fetched: a rolled-up period whose rows were still kept was
-- read whole to keep none of them (83,334 rows examined, 1.25 s at 28 M
-- rows, docs/performance.md). With start_ms third the same read is a range
-- that starts at the watermark. Every other reader of the index names
-- resource_name and period_start_ms only, and keeps its plan; a finish does
-- not change start_ms, so the index still costs a finish nothing. Rebuilt
-- in one ALTER, an online operation in InnoDB (ALGORITHM=INPLACE, LOCK=NONE).

-- +goose Up
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_period,
    ADD KEY idx_quota_usage_period (resource_name, period_start_ms, start_ms);

-- +goose Down
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_period,
    ADD KEY idx_quota_usage_period (resource_name, period_start_ms);
