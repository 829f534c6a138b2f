-- Operators' surface (issue 10): usage history, session listing, manual
-- period resets and the reason of an admin change.
--
-- idx_quota_usage_start serves GET /admin/usage and the FINISHED/LEAKED part
-- of GET /admin/sessions: rows of one resource by start time, newest first
-- (id is named so that rows of the same millisecond keep a stable order),
-- and every column the usage sums read, so that neither query touches the
-- table rows ("Using index" in EXPLAIN; see docs/operations.md). Adding it is
-- an online operation in InnoDB (ALGORITHM=INPLACE, LOCK=NONE).
-- period_anchor_ms: the last manual reset (Unix ms; 0 = never); the period
-- sequence starts at the later of it and created_ms.

-- +goose Up
ALTER TABLE quota_usage ADD KEY idx_quota_usage_start
    (resource_name, start_ms, id, client_id, status, leak_recovered,
     granted_amount, charged_amount, refunded_amount, overage_amount);
ALTER TABLE quota_policy ADD COLUMN period_anchor_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE quota_audit ADD COLUMN reason VARCHAR(500) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE quota_audit DROP COLUMN reason;
ALTER TABLE quota_policy DROP COLUMN period_anchor_ms;
ALTER TABLE quota_usage DROP KEY idx_quota_usage_start;
