-- Usage by business line (issue 10, GET /admin/usage?groupBy=line): the
-- covering index of the usage sums gains business_line (added to
-- quota_usage by 00003_pools), so that grouping by it still reads the index
-- only ("Using index" in EXPLAIN; docs/operators.md). The index is rebuilt
-- in one ALTER, an online operation in InnoDB (ALGORITHM=INPLACE,
-- LOCK=NONE); the queries keep an index on (resource_name, start_ms, id)
-- at every moment of it.

-- +goose Up
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_start,
    ADD KEY idx_quota_usage_start
        (resource_name, start_ms, id, client_id, status, leak_recovered,
         granted_amount, charged_amount, refunded_amount, overage_amount, business_line);

-- +goose Down
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_start,
    ADD KEY idx_quota_usage_start
        (resource_name, start_ms, id, client_id, status, leak_recovered,
         granted_amount, charged_amount, refunded_amount, overage_amount);
