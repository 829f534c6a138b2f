#!/usr/bin/env bash
# scripts/ledger-scale.sh — the ledger at 100 M rows (issue 23 §2): fills a
# PRIVATE MariaDB with synthetic ledger rows, rolls them up with
# `quota-center ledger prune`, measures what apply, finish, GET /admin/usage
# and the rebuild reads cost on it, and drops it. Run by hand, never by
# `make test` or `make bench`: the fill writes about 400 bytes a row (40 GB
# for 100 M: check `df` first) at 2,500–23,000 rows/s on the shared 2-core
# machine, niced (~7,000 at load 20–39: 23 M in an hour on 2026-12-03; 100 M
# needs ~30 minutes of one core's CPU, so hours on a loaded machine); a
# stopped fill resumes, and a partial one is a consistent ledger of the
# most recent days. Results:
# docs/performance.md, "Ledger lifecycle at scale".
#
#   scripts/ledger-scale.sh server    # start a private, tuned scratch mariadbd (below), niced
#   scripts/ledger-scale.sh fill      # database, schema, policies, QC_SCALE_ROWS rows
#   scripts/ledger-scale.sh rollup    # quota-center ledger prune (retention off), timed
#   scripts/ledger-scale.sh measure   # scripts/ledgerscale on an empty ledger, then on the filled one
#   scripts/ledger-scale.sh drop      # DROP DATABASE (do it: the disk is shared)
#   scripts/ledger-scale.sh server-stop  # shut the scratch server down and delete its files
#
# The rows (deterministic, from MariaDB's SEQUENCE engine, seq_1_to_N, by
# INSERT … SELECT in chunks of QC_SCALE_CHUNK rows, one transaction each,
# newest first):
# row i (1…N) has id i and belongs to resource res-(i mod 10), client
# client-00…49, business line "ads" for a third of them; it started at
# T0 + i·(120 days / N) (so 120 days of starts, uniform, ending at the fill's
# hour T), in the daily UTC period of its start. Rows that started in the
# last hour before T are USING (open sessions: ~0.03 %), 2 % of the others
# LEAKED, the rest FINISHED with 30–99 % of the grant charged and 1 % with
# overage. Session ids are 36 characters, ordered by time like UUIDv7
# (random UUIDv4 ids would scatter the unique key's inserts over the whole
# index: docs/performance.md says what that changes).
#
# Environment:
#   QC_SCALE_MYSQL   host:port of the private MariaDB (required; never the shared 3306)
#   QC_SCALE_DB      database                                   (default qc_scale)
#   QC_SCALE_ROWS    rows to write                              (default 100000000)
#   QC_SCALE_CHUNK   rows per INSERT … SELECT                   (default 1000000)
#   QC_SCALE_STREAMS chunks written at once (default 1: two streams were 3×
#                    slower in all, splitting the same index pages)
#   QC_SCALE_BATCH   QC_LEDGER_ROLLUP_BATCH of the rollup       (default 10000)
#   QC_SCALE_RESOURCE resource rolled up and measured ("" rolls up all) (default res-0)
#
#   QC_SCALE_MIN_FREE_GB the fill stops before a chunk when the server's
#                    disk has less free (a local server only)   (default 15)
#   QC_SCALE_DIR     the scratch server's files (server)        (default /work/ledger-scale-$USER)
#   QC_SCALE_POOL    its buffer pool (server)                   (default 7G)
#
# The scratch server (`server`) is for this measurement only, never for
# data anyone keeps: doublewrite off, innodb_flush_log_at_trx_commit=0
# (measure sets 1, as in production), a 4 GB redo log and a buffer pool
# that holds the hot ends of every index, under `nice -n 10`. On the shared
# 2-core machine (load 20–35) this did not make the fill faster than the
# 4–6 GB-pool servers of earlier runs: the fill is CPU-bound (about 18 s of
# mariadbd CPU per million rows, five B-tree inserts a row) and gets what
# CPU a niced process gets. Measured on 1 M rows (2026-12-03, load 33):
# with the indexes 54 s; primary key only 25 s plus 29 s for one ALTER that
# adds the four secondary indexes (the same, and at 100 M the sort of the
# index build needs tens of GB of temporary files: not used). Two streams
# (QC_SCALE_STREAMS=2) wrote 2 M rows in 410 s, 3–4× slower than one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hostport=${QC_SCALE_MYSQL:?set QC_SCALE_MYSQL=host:port of a private MariaDB}
host=${hostport%:*} port=${hostport##*:}
db=${QC_SCALE_DB:-qc_scale}
rows=${QC_SCALE_ROWS:-100000000}
chunk=${QC_SCALE_CHUNK:-1000000}
batch=${QC_SCALE_BATCH:-10000}
streams=${QC_SCALE_STREAMS:-1}
resource=${QC_SCALE_RESOURCE-res-0}
dsn="root@tcp($hostport)/$db"
bin=${QC_SCALE_BIN:-/tmp/ledger-scale-quota-center}

say() { printf '==> %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
sql() { mariadb --protocol=tcp -h"$host" -P"$port" -uroot "$@"; }

# build always rebuilds (cheap when nothing changed): a binary left from an
# older checkout would migrate and roll up with old code.
build() {
	go build -o "$bin" ./cmd/quota-center
}

scratch=${QC_SCALE_DIR:-/work/ledger-scale-${USER:-$(id -un)}}

# server starts the scratch mariadbd on QC_SCALE_MYSQL's port (127.0.0.1
# only), its data under QC_SCALE_DIR.
server() {
	[ "$host" = 127.0.0.1 ] || { echo "server: QC_SCALE_MYSQL must be 127.0.0.1:PORT" >&2; exit 2; }
	mkdir -p "$scratch"
	[ -d "$scratch/db/mysql" ] || mariadb-install-db --no-defaults --datadir="$scratch/db" \
		--auth-root-authentication-method=normal --user="$(id -un)" >"$scratch/install.log" 2>&1
	nice -n 10 mariadbd --no-defaults --datadir="$scratch/db" --port="$port" --bind-address=127.0.0.1 \
		--socket="$scratch/mysql.sock" --user="$(id -un)" --innodb-buffer-pool-size="${QC_SCALE_POOL:-7G}" \
		--innodb-log-file-size=4G --innodb-log-buffer-size=256M --innodb-flush-log-at-trx-commit=0 \
		--innodb-doublewrite=0 --innodb-autoinc-lock-mode=2 --innodb-io-capacity=2000 \
		--innodb-io-capacity-max=4000 --innodb-flush-method=O_DIRECT --skip-log-bin --performance-schema=OFF \
		--max-connections=50 --tmpdir="$scratch" --log-error="$scratch/mariadb.err" >/dev/null 2>&1 &
	echo $! >"$scratch/pid"
	for _ in $(seq 1 120); do sql -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.5; done
	sql -e "SELECT @@innodb_buffer_pool_size, @@innodb_doublewrite, @@innodb_log_file_size" >&2
	say "server: pid $(cat "$scratch/pid"), data in $scratch"
}

server_stop() {
	mariadb-admin --protocol=tcp -h"$host" -P"$port" -uroot shutdown
	rm -rf "$scratch"
	say "server stopped, $scratch deleted"
}

fill() {
	build
	sql -e "CREATE DATABASE IF NOT EXISTS $db"
	QC_MYSQL_DSN=$dsn "$bin" migrate >&2
	sql "$db" -e "CREATE TABLE IF NOT EXISTS scale_meta (t_end_ms BIGINT NOT NULL, rows_total BIGINT NOT NULL)"
	local t_end span=$((120 * 86400000))
	t_end=$(sql -N "$db" -e "SELECT t_end_ms FROM scale_meta WHERE rows_total = $rows")
	if [ -z "$t_end" ]; then # a new fill (a resumed one keeps its T)
		t_end=$(($(date -u +%s) / 3600 * 3600 * 1000))
		sql "$db" -e "DELETE FROM scale_meta; INSERT INTO scale_meta VALUES ($t_end, $rows)"
	fi
	# One policy per resource, daily periods: the lifecycle job looks after
	# resources with a policy.
	local now_ms=$(($(date -u +%s) * 1000))
	for r in 0 1 2 3 4 5 6 7 8 9; do
		sql "$db" -e "INSERT IGNORE INTO quota_policy (resource_name, quota_type, total_limit, reset_cron, timezone,
			created_ms, updated_ms) VALUES ('res-$r', 'TOKENS', 1000000000000, '0 0 * * *', 'UTC', $((t_end - span - 86400000)), $now_ms)"
	done
	sql -e "SET GLOBAL innodb_flush_log_at_trx_commit = 2"
	say "fill: $rows rows in chunks of $chunk, $streams streams, T = $t_end"
	local s
	for ((s = 0; s < streams; s++)); do
		fill_stream "$s" "$t_end" &
	done
	wait
	sql -e "SET GLOBAL innodb_flush_log_at_trx_commit = 1"
	sql "$db" -e "ANALYZE TABLE quota_usage" >&2
	sql -e "SELECT table_rows, ROUND(data_length/1e9, 1) AS data_gb, ROUND(index_length/1e9, 1) AS index_gb
		FROM information_schema.tables WHERE table_schema = '$db' AND table_name = 'quota_usage'"
}

# fill_stream S T writes chunks S, S+streams, S+2·streams, … counted from
# the newest (a fill stopped early holds the most recent days, with the open
# period and its USING rows). A chunk is one transaction: present whole or
# not at all, so a stopped fill resumes.
fill_stream() {
	local s=$1 t_end=$2 span=$((120 * 86400000))
	local last=$(((rows + chunk - 1) / chunk - 1))
	local k off n t0 free_gb datadir min_free=${QC_SCALE_MIN_FREE_GB:-15}
	datadir=$(sql -N -e "SELECT @@datadir")
	for ((k = last - s; k >= 0; k -= streams)); do
		off=$((k * chunk))
		n=$((rows - off < chunk ? rows - off : chunk))
		if [ -n "$(sql -N "$db" -e "SELECT 1 FROM quota_usage WHERE id = $((off + 1))")" ]; then
			continue
		fi
		free_gb=$(df --output=avail -BG "$datadir" | tail -1 | tr -dc 0-9)
		if ((free_gb < min_free)); then
			say "fill: stopped, $free_gb GB free on $datadir (QC_SCALE_MIN_FREE_GB=$min_free)"
			return 1
		fi
		t0=$SECONDS
		# i = seq + off; the start: T0 + i * span / rows (integer ms).
		sql "$db" -e "
		INSERT INTO quota_usage (id, resource_name, client_id, session_id, period_start_ms,
			apply_amount, min_amount, granted_amount, charged_amount, refunded_amount, overage_amount,
			start_ms, end_ms, status, leak_recovered, business_line, drawn_shared)
		SELECT i, CONCAT('res-', i % 10), CONCAT('client-', LPAD((i DIV 10) * 37 % 50, 2, '0')),
			CONCAT(LPAD(HEX(i), 12, '0'), '-7', LPAD(HEX(i * 40503 % 4096), 3, '0'), '-8000-',
			       LPAD(HEX(i * 2654435761 % 281474976710656), 12, '0')),
			st - st % 86400000,
			g, 0, g,
			CASE WHEN st >= $t_end - 3600000 OR i % 50 = 7 THEN g ELSE g * (30 + i * 7 % 70) DIV 100 + IF(i % 100 = 57, 100, 0) END,
			CASE WHEN st >= $t_end - 3600000 OR i % 50 = 7 THEN 0 ELSE g - g * (30 + i * 7 % 70) DIV 100 END,
			IF(st < $t_end - 3600000 AND i % 50 <> 7 AND i % 100 = 57, 100, 0),
			st,
			IF(st >= $t_end - 3600000, NULL, st + 1000 + i * 31 % 600000),
			CASE WHEN st >= $t_end - 3600000 THEN 'USING' WHEN i % 50 = 7 THEN 'LEAKED' ELSE 'FINISHED' END,
			0, IF(i % 3 = 0, 'ads', ''), g
		FROM (SELECT seq + $off AS i, $t_end - $span + (seq + $off) * $span DIV $rows AS st,
		             1000 + (seq + $off) * 13 % 9000 AS g
		      FROM seq_1_to_$n) s"
		say "fill: chunk $k ($((off + n)) rows) in $((SECONDS - t0)) s"
	done
}

# rollup: the lifecycle job's pass (retention 0: rollups only; the deletes
# were measured at 20 M rows, docs/performance.md), no pause, on
# QC_SCALE_RESOURCE (default res-0, the resource measure reads; "" = all).
rollup() {
	build
	QC_MYSQL_DSN=$dsn "$bin" migrate >&2 # a fill from an older checkout lacks newer tables
	local t0=$SECONDS
	local only=()
	[ -n "$resource" ] && only=(--resource "$resource")
	QC_MYSQL_DSN=$dsn QC_LEDGER_RETENTION=0 QC_LEDGER_PAUSE=0s QC_LEDGER_ROLLUP_BATCH=$batch \
		"$bin" ledger prune "${only[@]}"
	say "rollup: $((SECONDS - t0)) s"
	sql "$db" -e "SELECT COUNT(*) AS rollup_rows, SUM(sessions) AS rolled_up_sessions FROM quota_usage_rollup;
		SELECT resource_name, FROM_UNIXTIME(rolled_to_ms DIV 1000) AS rolled_to FROM quota_usage_lifecycle;
		SELECT resource_name, COUNT(*) AS kept_raw FROM quota_usage_rollup_deferred GROUP BY resource_name"
}

# measure: the counts and times on the filled database, and on an empty
# one (qc_scale_empty, made and dropped here) as the baseline.
measure() {
	local slow
	slow=$(sql -N -e "SELECT @@slow_query_log_file")
	case $slow in /*) ;; *) slow=$(sql -N -e "SELECT @@datadir")/$slow ;; esac
	go build -o /tmp/ledgerscale ./scripts/ledgerscale
	# Durable commits, as in production (a stopped fill left them at 2).
	sql -e "SET GLOBAL innodb_flush_log_at_trx_commit = 1"
	sql -e "SELECT table_rows, ROUND(data_length/1e9, 1) AS data_gb, ROUND(index_length/1e9, 1) AS index_gb
		FROM information_schema.tables WHERE table_schema = '$db' AND table_name = 'quota_usage'"
	sql -e "DROP DATABASE IF EXISTS qc_scale_empty; CREATE DATABASE qc_scale_empty"
	QC_MYSQL_DSN="root@tcp($hostport)/qc_scale_empty" "$bin" migrate >&2
	/tmp/ledgerscale -dsn "root@tcp($hostport)/qc_scale_empty" -slowlog "$slow" -label "empty ledger" -resource "${resource:-res-0}"
	sql -e "DROP DATABASE qc_scale_empty"
	/tmp/ledgerscale -dsn "$dsn" -slowlog "$slow" -label "filled ledger ($db)" -resource "${resource:-res-0}"
}

drop() {
	sql -e "DROP DATABASE IF EXISTS $db"
	say "dropped $db"
}

case ${1:-} in
server | fill | rollup | measure | drop) "$1" ;;
server-stop) server_stop ;;
*)
	echo "usage: $0 server|fill|rollup|measure|drop|server-stop" >&2
	exit 2
	;;
esac
