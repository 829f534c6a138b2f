-- Business lines, pools and temporary grants (issue 13; internal/pools).
-- quota_pool_settings: a policy's "pools" object (absent = defaults).
-- quota_line: the lines of a resource; weight 0 when an explicit dedicated amount is set.
-- quota_grant: temporary grants and buffer releases (kind), active in [effective_ms, expires_ms),
--   voided_ms set when voided by hand.
-- quota_pool_event: the controller's and operators' pool decisions with their reasons.
-- quota_reclaim: reclaims WARNED → CONFIRMED → EXECUTED (or CANCELLED, RETURNED).
-- quota_usage gains the split of each session: business_line and what its grant drew from
-- each pool (at apply; what it is charged to after finish), drawn_grants "id=n;id=n".

-- +goose Up
CREATE TABLE quota_pool_settings (
    resource_name             VARCHAR(64) NOT NULL,
    shared_percent            INT         NOT NULL,
    dedicated_percent         INT         NOT NULL,
    buffer_percent            INT         NOT NULL,
    borrow_limit_percent      INT         NOT NULL,
    elasticity                ENUM('AUTO','PREDICTIVE','REACTIVE','OFF') NOT NULL DEFAULT 'AUTO',
    reclaim_threshold_percent INT         NOT NULL DEFAULT 90,
    reclaim_confirm_seconds   BIGINT      NOT NULL DEFAULT 30,
    reclaim_dry_run           TINYINT(1)  NOT NULL DEFAULT 0,
    updated_ms                BIGINT      NOT NULL,
    PRIMARY KEY (resource_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE quota_line (
    resource_name VARCHAR(64) NOT NULL,
    line          VARCHAR(64) NOT NULL,
    tier          ENUM('CORE','GROWTH','EXPLORE') NOT NULL,
    weight        BIGINT      NOT NULL DEFAULT 0,
    dedicated     BIGINT      NOT NULL DEFAULT 0,
    created_ms    BIGINT      NOT NULL,
    updated_ms    BIGINT      NOT NULL,
    PRIMARY KEY (resource_name, line)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE quota_grant (
    id            VARCHAR(64)  NOT NULL,
    resource_name VARCHAR(64)  NOT NULL,
    kind          ENUM('GRANT','RELEASE') NOT NULL,
    line          VARCHAR(64)  NOT NULL DEFAULT '',
    amount        BIGINT       NOT NULL,
    effective_ms  BIGINT       NOT NULL,
    expires_ms    BIGINT       NOT NULL,
    reason        VARCHAR(500) NOT NULL DEFAULT '',
    voided_ms     BIGINT       NULL,
    created_ms    BIGINT       NOT NULL,
    PRIMARY KEY (id),
    KEY idx_quota_grant_resource (resource_name, expires_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE quota_pool_event (
    id            BIGINT       NOT NULL AUTO_INCREMENT,
    resource_name VARCHAR(64)  NOT NULL,
    at_ms         BIGINT       NOT NULL,
    kind          VARCHAR(32)  NOT NULL,
    line          VARCHAR(64)  NOT NULL DEFAULT '',
    amount        BIGINT       NOT NULL DEFAULT 0,
    reason        VARCHAR(500) NOT NULL DEFAULT '',
    PRIMARY KEY (id),
    KEY idx_quota_pool_event_resource (resource_name, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE quota_reclaim (
    id            VARCHAR(64)  NOT NULL,
    resource_name VARCHAR(64)  NOT NULL,
    from_line     VARCHAR(64)  NOT NULL,
    to_line       VARCHAR(64)  NOT NULL,
    amount        BIGINT       NOT NULL,
    state         ENUM('WARNED','CONFIRMED','EXECUTED','CANCELLED','RETURNED') NOT NULL,
    dry_run       TINYINT(1)   NOT NULL DEFAULT 0,
    warned_ms     BIGINT       NOT NULL,
    updated_ms    BIGINT       NOT NULL,
    reason        VARCHAR(500) NOT NULL DEFAULT '',
    PRIMARY KEY (id),
    KEY idx_quota_reclaim_resource (resource_name, warned_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE quota_usage
    ADD COLUMN business_line   VARCHAR(64)   NOT NULL DEFAULT '',
    ADD COLUMN drawn_dedicated BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN drawn_shared    BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN drawn_buffer    BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN drawn_grant     BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN drawn_grants    VARCHAR(1000) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE quota_usage
    DROP COLUMN drawn_grants,
    DROP COLUMN drawn_grant,
    DROP COLUMN drawn_buffer,
    DROP COLUMN drawn_shared,
    DROP COLUMN drawn_dedicated,
    DROP COLUMN business_line;
DROP TABLE quota_reclaim;
DROP TABLE quota_pool_event;
DROP TABLE quota_grant;
DROP TABLE quota_line;
DROP TABLE quota_pool_settings;
