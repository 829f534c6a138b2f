#!/usr/bin/env bash
# scripts/soak.sh — the soak run behind `make soak` (issue 3 §9).
#
# Runs cmd/qc-soak: private redis-server and mariadbd on free ports (the
# shared 6379/3306 servers are never touched), quota-center in-process,
# thousands of sessions from concurrent clients, random backend faults, then
# the invariant checks (PASS/FAIL lines) and the answers counted by code.
# Exit status: 0 all invariants hold, 1 an invariant failed, 2 it could not
# run (e.g. redis-server or mariadbd missing).
#
# Environment:
#   QC_SOAK_DURATION  how long clients run and faults are injected (default 60s)
#   QC_SOAK_WORKERS   concurrent clients (default 16)
#   QC_SOAK_SEED      random seed, to replay a schedule (default: random, printed)
# Further arguments go to qc-soak (see: go run ./cmd/qc-soak -h), e.g.
#   scripts/soak.sh -v --keep
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

args=(--duration "${QC_SOAK_DURATION:-60s}" --workers "${QC_SOAK_WORKERS:-16}")
[[ -n ${QC_SOAK_SEED:-} ]] && args+=(--seed "$QC_SOAK_SEED")

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v mariadbd >/dev/null 2>&1 && [[ ! -x /usr/sbin/mariadbd ]] && ! command -v mysqld >/dev/null 2>&1 && [[ ! -x /usr/sbin/mysqld ]]; then
	missing+=(mariadbd)
fi
command -v mariadb-install-db >/dev/null 2>&1 || command -v mysql_install_db >/dev/null 2>&1 || missing+=(mariadb-install-db)
if ((${#missing[@]})); then
	echo "make soak: needs ${missing[*]} on this machine (apt-get install redis-server mariadb-server); private instances are started on free ports" >&2
	exit 2
fi

mkdir -p bin
go build -o bin/qc-soak ./cmd/qc-soak
exec bin/qc-soak "${args[@]}" "$@"
