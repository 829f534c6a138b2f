-- Rows kept raw below the watermark (issue 23 §2, internal/mysqlstore
-- lifecycle.go): a LEAKED or CANCELLED row settled less than
-- QC_LEDGER_ROLLUP_AFTER ago may still change (a late finish trues a leaked
-- one up, a retried apply revives a cancelled one), so it is not summed
-- into quota_usage_rollup. Before, the rollup stopped at the first such row
-- and the watermark stayed up to QC_LEDGER_ROLLUP_AFTER (25 h) behind, so
-- GET /admin/usage read a day of raw rows for every resource with leaks
-- (up to 1.23 s at 35 M rows, docs/performance.md). Now the rollup passes
-- such a row, leaves it out of the sums and lists it here; the readers of
-- the rolled-up range (usage, period totals) read the listed rows raw
-- (an entry counts only while its row still starts where it was listed,
-- below the watermark: a revived row takes its retry's start and is read
-- with the raw rows, or listed again there), and a later pass sums each
-- once it can no longer change and removes it from the list, in one
-- transaction. The list holds about
-- QC_LEDGER_ROLLUP_AFTER of leaks and cancels per resource: small.
--
-- quota_usage_rollup_deferred: resource_name, start_ms and period_start_ms
--   (the row's when listed) and id (quota_usage.id) of each row below the
--   watermark that is not in the rollups. Usage reads it by (resource_name,
--   start_ms), the period totals by (resource_name, period_start_ms): a
--   period with no listed row (the current one, which every rebuild reads,
--   seldom has any: a late fail-open row, internal/mysqlstore lateinsert.go)
--   costs one index dive. Retention deletes no listed row.

-- +goose Up
CREATE TABLE quota_usage_rollup_deferred (
    resource_name VARCHAR(64) NOT NULL,
    start_ms        BIGINT      NOT NULL,
    period_start_ms BIGINT      NOT NULL,
    id              BIGINT      NOT NULL,
    PRIMARY KEY (resource_name, start_ms, id),
    KEY idx_quota_usage_rollup_deferred_period (resource_name, period_start_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
-- A version without the list reads every row below the watermark through
-- the rollups: the listed rows are summed in as they are now (a later
-- change of one of them is then not seen there). A listed USING row (a
-- fail-open session written late below the watermark, internal/mysqlstore
-- lateinsert.go, not yet settled) is not: check there is none first
-- (docs/operations.md, "Rolling back").
INSERT INTO quota_usage_rollup
    (resource_name, hour_ms, period_start_ms, client_id, business_line,
     sessions, leaked, granted, charged, refunded, overage)
    SELECT q.resource_name, q.start_ms - q.start_ms % 3600000, q.period_start_ms, q.client_id, q.business_line,
        COUNT(*), SUM(CASE WHEN q.status = 'LEAKED' OR q.leak_recovered = 1 THEN 1 ELSE 0 END),
        SUM(q.granted_amount), SUM(q.charged_amount), SUM(q.refunded_amount), SUM(q.overage_amount)
    FROM quota_usage_rollup_deferred d
    JOIN quota_usage q ON q.id = d.id AND q.start_ms = d.start_ms
    JOIN quota_usage_lifecycle l ON l.resource_name = d.resource_name
    WHERE q.start_ms < l.rolled_to_ms AND q.status <> 'USING'
    GROUP BY q.resource_name, q.start_ms - q.start_ms % 3600000, q.period_start_ms, q.client_id, q.business_line
    ON DUPLICATE KEY UPDATE sessions = sessions + VALUES(sessions),
        leaked = leaked + VALUES(leaked), granted = granted + VALUES(granted),
        charged = charged + VALUES(charged), refunded = refunded + VALUES(refunded),
        overage = overage + VALUES(overage);
DROP TABLE quota_usage_rollup_deferred;
