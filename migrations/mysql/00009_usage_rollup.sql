-- The ledger's lifecycle (issue 23 §2; internal/lifecycle, docs/operations.md
-- "The ledger's lifecycle"). Settled rows are rolled up, oldest first, into
-- per-hour sums and, past QC_LEDGER_RETENTION, deleted in bounded batches.
--
-- quota_usage_rollup: the sums of the rolled-up ledger rows of a resource per
--   UTC hour of their start (hour_ms = start_ms - start_ms % 3600000), period
--   (period_start_ms), client and business line: sessions, leaked (LEAKED or
--   leak-recovered), and the granted, charged (FINISHED and LEAKED: what the
--   period was charged), refunded and overage amounts in the policy's unit. A
--   rolled-up row is settled (never USING), so open and reserved are 0.
--   GET /admin/usage reads it by (resource_name, hour_ms), the period totals
--   of a rebuild by (resource_name, period_start_ms).
-- quota_usage_lifecycle: per resource, rolled_to_ms (Unix ms): every ledger
--   row of the resource with start_ms < rolled_to_ms is summed in
--   quota_usage_rollup and may be deleted; every row at or after it is read
--   raw. The rollup job moves it forward in the same transaction as the sums
--   it adds, holding this row's lock (SELECT … FOR UPDATE), so two instances
--   never add the same rows twice.

-- +goose Up
CREATE TABLE quota_usage_rollup (
    resource_name   VARCHAR(64)  NOT NULL,
    hour_ms         BIGINT       NOT NULL,
    period_start_ms BIGINT       NOT NULL,
    client_id       VARCHAR(128) NOT NULL,
    business_line   VARCHAR(64)  NOT NULL,
    sessions        BIGINT       NOT NULL DEFAULT 0,
    leaked          BIGINT       NOT NULL DEFAULT 0,
    granted         BIGINT       NOT NULL DEFAULT 0,
    charged         BIGINT       NOT NULL DEFAULT 0,
    refunded        BIGINT       NOT NULL DEFAULT 0,
    overage         BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (resource_name, hour_ms, period_start_ms, client_id, business_line),
    KEY idx_quota_usage_rollup_period (resource_name, period_start_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE quota_usage_lifecycle (
    resource_name VARCHAR(64) NOT NULL,
    rolled_to_ms  BIGINT      NOT NULL DEFAULT 0,
    updated_ms    BIGINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (resource_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
-- Rows already deleted by the retention are gone: their sums leave with
-- these tables.
DROP TABLE quota_usage_lifecycle;
DROP TABLE quota_usage_rollup;
