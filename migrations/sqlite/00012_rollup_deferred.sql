-- Rows kept raw below the watermark (issue 23 §2); the same table as
-- mysql/00012_rollup_deferred.sql, which says why.

-- +goose Up
CREATE TABLE quota_usage_rollup_deferred (
    resource_name TEXT    NOT NULL,
    start_ms        INTEGER NOT NULL,
    period_start_ms INTEGER NOT NULL,
    id              INTEGER NOT NULL,
    PRIMARY KEY (resource_name, start_ms, id)
) STRICT;
CREATE INDEX idx_quota_usage_rollup_deferred_period ON quota_usage_rollup_deferred (resource_name, period_start_ms);

-- +goose Down
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
    ON CONFLICT (resource_name, hour_ms, period_start_ms, client_id, business_line) DO UPDATE SET
        sessions = sessions + excluded.sessions, leaked = leaked + excluded.leaked,
        granted = granted + excluded.granted, charged = charged + excluded.charged,
        refunded = refunded + excluded.refunded, overage = overage + excluded.overage;
DROP INDEX idx_quota_usage_rollup_deferred_period;
DROP TABLE quota_usage_rollup_deferred;
