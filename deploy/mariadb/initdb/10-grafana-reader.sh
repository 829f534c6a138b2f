#!/bin/bash
# Run once by the mariadb image on an empty data directory
# (/docker-entrypoint-initdb.d): a read-only user for Grafana's ledger panels.
set -euo pipefail
mariadb -uroot -p"${MARIADB_ROOT_PASSWORD}" <<SQL
CREATE USER IF NOT EXISTS 'grafana'@'%' IDENTIFIED BY '${QC_GRAFANA_DB_PASSWORD:-grafana}';
GRANT SELECT ON quota_center.quota_usage TO 'grafana'@'%';
SQL
