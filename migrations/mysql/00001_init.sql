-- Initial schema of quota-center for MySQL 8 / MariaDB 10.6+.
-- Times are BIGINT Unix milliseconds (UTC) on purpose: no DATETIME rounding,
-- no session time zone ambiguity. Amounts are in the policy's unit.
-- utf8mb4_bin: resource names and session ids compare byte for byte, as they
-- do in Redis and SQLite.

-- +goose Up
CREATE TABLE quota_policy (
    id                     BIGINT       NOT NULL AUTO_INCREMENT,
    resource_name          VARCHAR(64)  NOT NULL,
    quota_type             ENUM('DURATION','COUNT','TOKENS','BANDWIDTH') NOT NULL,
    total_limit            BIGINT       NOT NULL,
    reset_cron             VARCHAR(128) NOT NULL DEFAULT '',
    timezone               VARCHAR(64)  NOT NULL DEFAULT 'UTC',
    leak_threshold_seconds BIGINT       NOT NULL DEFAULT 300,
    fail_mode              ENUM('CLOSED','OPEN') NOT NULL DEFAULT 'CLOSED',
    created_ms             BIGINT       NOT NULL,
    updated_ms             BIGINT       NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_quota_policy_resource_name (resource_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The ledger: one row per session. charged_amount holds the grant while
-- USING (reserved) and when LEAKED (charged), the actual usage (overage
-- included) once FINISHED.
CREATE TABLE quota_usage (
    id              BIGINT      NOT NULL AUTO_INCREMENT,
    resource_name   VARCHAR(64) NOT NULL,
    client_id       VARCHAR(128) NOT NULL DEFAULT '',
    session_id      VARCHAR(64) NOT NULL,
    period_start_ms BIGINT      NOT NULL,
    apply_amount    BIGINT      NOT NULL DEFAULT 0,
    min_amount      BIGINT      NOT NULL DEFAULT 0,
    granted_amount  BIGINT      NOT NULL DEFAULT 0,
    charged_amount  BIGINT      NOT NULL DEFAULT 0,
    refunded_amount BIGINT      NOT NULL DEFAULT 0,
    overage_amount  BIGINT      NOT NULL DEFAULT 0,
    start_ms        BIGINT      NOT NULL,
    end_ms          BIGINT      NULL,
    status          ENUM('USING','FINISHED','LEAKED') NOT NULL,
    leak_recovered  TINYINT(1)  NOT NULL DEFAULT 0,
    pool            VARCHAR(64) NOT NULL DEFAULT '',
    created_at      DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY uk_quota_usage_session_id (session_id),
    KEY idx_quota_usage_period (resource_name, period_start_ms, status),
    -- open (USING) sessions of a resource, read when Redis is rebuilt
    KEY idx_quota_usage_open (status, resource_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE quota_usage;
DROP TABLE quota_policy;
