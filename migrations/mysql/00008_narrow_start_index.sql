-- The start index without the amounts (issue 11 §1, docs/performance-notes.md):
-- idx_quota_usage_start keeps (resource_name, start_ms, id), the range and
-- order of GET /admin/usage and the session history, and no longer carries
-- client_id, status, leak_recovered, the four amounts and business_line.
-- Covering, it cost every apply an 11-column entry and every finish a
-- rewrite of it (status and amounts change when a session settles); now a
-- finish leaves it alone. The usage sums read the table rows of their range
-- by primary key instead (rows of one resource in start order are close to
-- id order). Rebuilt in one ALTER, online in InnoDB (ALGORITHM=INPLACE,
-- LOCK=NONE), an index on (resource_name, start_ms, id) present at every
-- moment of it.

-- +goose Up
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_start,
    ADD KEY idx_quota_usage_start (resource_name, start_ms, id);

-- +goose Down
ALTER TABLE quota_usage
    DROP KEY idx_quota_usage_start,
    ADD KEY idx_quota_usage_start
        (resource_name, start_ms, id, client_id, status, leak_recovered,
         granted_amount, charged_amount, refunded_amount, overage_amount, business_line);
