#!/usr/bin/env bash
# scripts/ledger-scale.sh — the ledger at 100 M rows (issue 23 §2): fills a
# PRIVATE MariaDB with synthetic ledger rows, rolls them up with
# `quota-center ledger prune`, measures what apply, finish, GET /admin/usage
# and the rebuild reads cost on it, and drops it. Run by hand, never by
# `make test` or `make bench`: the rows take about 220 bytes each without
# the secondary indexes (13 GB for 60 M) and the index build needs sort
# files of ~190 bytes a row on top (check `df` first). Timings on the
# shared 2-core machine, niced, load 15–22 (2026-12-03): the load 50,400
# rows/s (60 M rows in 19 min 51 s, 55–135 s per 5 M chunk), the one ALTER
# that builds the four secondary indexes on 60 M rows 34.5 minutes (2,071 s;
# 10.9 GB of indexes, 12.5 GB of sort files at the peak), the rollup of
# one resource ~28,000 rows/s. 100 M rows (2026-12-03 21:52–23:14, load
# 12–25, 4 GB buffer pool): 36.7 minutes of load, 40 minutes of index
# build (18.2 GB of indexes, ~22 GB of sort files), the rollup of res-0
# (9.9 M rows) 4 minutes, the measure under a minute. A stopped
# fill resumes (QC_SCALE_UNTIL stops it between chunks and goes on to the
# indexes), and a partial one is a
# consistent ledger of the most recent days. Results:
# docs/performance.md, "Ledger lifecycle at scale".
#
#   scripts/ledger-scale.sh server    # start a private, tuned scratch mariadbd (below), niced
#   nice -n 10 scripts/ledger-scale.sh fill   # database, schema, policies, QC_SCALE_ROWS rows, indexes
#   scripts/ledger-scale.sh rollup    # quota-center ledger prune (retention off), timed
#   scripts/ledger-scale.sh measure   # scripts/ledgerscale on an empty ledger, then on the filled one
#   scripts/ledger-scale.sh drop      # DROP DATABASE (do it: the disk is shared)
#   scripts/ledger-scale.sh server-stop  # shut the scratch server down and delete its files
#
# How the fill writes: the migrations make the schema; the secondary
# indexes of quota_usage are dropped while it is empty (their definitions
# kept in scale_indexes); `ledgerscale gen` (scripts/ledgerscale/gen.go) writes the rows
# as TSV into a FIFO read by LOAD DATA LOCAL INFILE, QC_SCALE_CHUNK rows per
# statement (one transaction each, newest chunk first, unique_checks=0,
# foreign_key_checks=0, sql_log_bin=0), so InnoDB appends to the primary
# key only; then one ALTER TABLE adds the indexes back (a sorted build per
# index, innodb_sort_buffer_size 64M). The rows (deterministic; the same as
# the former INSERT … SELECT from seq_1_to_N wrote):
# row i (1…N) has id i and belongs to resource res-(i mod 10), client
# client-00…49, business line "ads" for a third of them; it started at
# T0 + i·(120 days / N) (so 120 days of starts, uniform, ending at the fill's
# hour T), in the daily UTC period of its start. Rows that started in the
# last hour before T are USING (open sessions: ~0.03 %), 2 % of the others
# LEAKED (all in res-7: 20 % of its rows), the rest FINISHED with 30–99 % of
# the grant charged and 1 % with overage. Session ids are 35 characters,
# ordered by time like UUIDv7 (random UUIDv4 ids would scatter the unique
# key's inserts over the whole index: docs/performance.md says what that
# changes).
#
# Environment:
#   QC_SCALE_MYSQL   host:port of the private MariaDB (required; never the shared 3306)
#   QC_SCALE_DB      database                                   (default qc_scale)
#   QC_SCALE_ROWS    rows of the whole fill (its density)       (default 100000000)
#   QC_SCALE_CHUNK   rows per LOAD DATA                         (default 5000000)
#   QC_SCALE_UNTIL   a `date -d` time: no chunk starts after it; the fill
#                    then builds the indexes on what it has     (default: none)
#   QC_SCALE_BATCH   QC_LEDGER_ROLLUP_BATCH of the rollup       (default 10000)
#   QC_SCALE_RESOURCE resource rolled up and measured ("" rolls up all) (default res-0)
#   QC_SCALE_SPAN_DAYS days of starts the fill spans (default 120); with
#                    QC_SCALE_ROWS scaled by the same factor (100 M × days
#                    / 120) it keeps the 100 M run's density per resource
#   QC_SCALE_TEND    a `date -d` time: the fill's hour T (default now);
#                    21:00 UTC of a past day gives the 100 M run's current
#                    period (21 h of rows). `ledgerscale rollup` then rolls
#                    up at T + 10 min (ledgerscale/rollup.go)
#
#   QC_SCALE_MIN_FREE_GB the fill stops before a chunk when the server's
#                    disk has less free (a local server only)   (default 15)
#   QC_SCALE_DIR     the scratch server's files (server)        (default /work/ledger-scale-$USER)
#   QC_SCALE_POOL    its buffer pool (server)                   (default 7G)
#
# The scratch server (`server`) is for this measurement only, never for
# data anyone keeps: doublewrite off, innodb_flush_log_at_trx_commit=0
# (2 during the fill; measure sets 1, as in production), no binary log, a
# 4 GB redo log, local_infile on, a 64 MB sort buffer for the index build
# and a buffer pool that holds the hot ends of every index, under
# `nice -n 10`. The former fill (INSERT … SELECT with all five B-trees)
# was CPU-bound at ~18 s of mariadbd CPU per million rows and wrote
# ~7,000 rows/s niced at load 20–39 (23–35 M rows in an hour).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hostport=${QC_SCALE_MYSQL:?set QC_SCALE_MYSQL=host:port of a private MariaDB}
host=${hostport%:*} port=${hostport##*:}
db=${QC_SCALE_DB:-qc_scale}
rows=${QC_SCALE_ROWS:-100000000}
chunk=${QC_SCALE_CHUNK:-5000000}
batch=${QC_SCALE_BATCH:-10000}
resource=${QC_SCALE_RESOURCE-res-0}
dsn="root@tcp($hostport)/$db"
bin=${QC_SCALE_BIN:-/tmp/ledger-scale-quota-center}
gen=${QC_SCALE_GEN:-/tmp/ledgerscale} # the ledgerscale binary that fill and measure build

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
		--max-connections=50 --tmpdir="$scratch" --local-infile=1 --innodb-sort-buffer-size=64M \
		--log-error="$scratch/mariadb.err" >/dev/null 2>&1 &
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
	local t_end span=$((${QC_SCALE_SPAN_DAYS:-120} * 86400000))
	t_end=$(sql -N "$db" -e "SELECT t_end_ms FROM scale_meta WHERE rows_total = $rows")
	if [ -z "$t_end" ]; then # a new fill (a resumed one keeps its T)
		t_end=$(($(date -u ${QC_SCALE_TEND:+-d "$QC_SCALE_TEND"} +%s) / 3600 * 3600 * 1000))
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
	# The secondary indexes go while the table is empty, kept in
	# scale_indexes, and come back by one sorted ALTER after the load.
	sql "$db" -e "CREATE TABLE IF NOT EXISTS scale_indexes (def TEXT NOT NULL)"
	if [ -z "$(sql -N "$db" -e "SELECT 1 FROM scale_indexes LIMIT 1")" ]; then
		local defs drops
		defs=$(sql -N -r "$db" -e "SHOW CREATE TABLE quota_usage" | grep -E '^ +(UNIQUE )?KEY ' | sed 's/,$//; s/^ *//')
		drops=$(sed -E 's/^(UNIQUE )?KEY (`[^`]+`).*/DROP INDEX \2/' <<<"$defs" | paste -sd, -)
		sql "$db" -e "SELECT 1 FROM quota_usage LIMIT 1" | grep -q . && { echo "fill: quota_usage is not empty" >&2; exit 1; }
		while IFS= read -r d; do
			sql "$db" -e "INSERT INTO scale_indexes VALUES ('$(sed "s/'/''/g" <<<"$d")')"
		done <<<"$defs"
		sql "$db" -e "ALTER TABLE quota_usage $drops"
	fi
	go build -o "$gen" ./scripts/ledgerscale
	say "fill: $rows rows by LOAD DATA in chunks of $chunk (primary key only), T = $t_end"
	fill_load "$t_end" "$span"
	local adds
	adds=$(sql -N -r "$db" -e "SELECT def FROM scale_indexes" | sed 's/^/ADD /' | paste -sd, -)
	if [ -n "$adds" ]; then
		local t0=$SECONDS
		say "fill: adding the secondary indexes (sorted build)"
		sql "$db" -e "ALTER TABLE quota_usage $adds, ALGORITHM=INPLACE, LOCK=NONE"
		sql "$db" -e "DELETE FROM scale_indexes"
		say "fill: indexes in $((SECONDS - t0)) s"
	fi
	sql -e "SET GLOBAL innodb_flush_log_at_trx_commit = 1"
	sql "$db" -e "ANALYZE TABLE quota_usage" >&2
	sql -e "SELECT table_rows, ROUND(data_length/1e9, 1) AS data_gb, ROUND(index_length/1e9, 1) AS index_gb
		FROM information_schema.tables WHERE table_schema = '$db' AND table_name = 'quota_usage'"
}

# fill_load T loads chunks counted from the newest (a fill stopped early
# holds the most recent days, with the open period and its USING rows):
# `ledgerscale gen` writes a chunk's rows as TSV into a FIFO that one LOAD
# DATA LOCAL INFILE reads, without unique or foreign key checks and without
# the binary log. A chunk is one statement, one transaction: present whole
# or not at all, so a stopped fill resumes.
fill_load() {
	local t_end=$1 span=$2
	local last=$(((rows + chunk - 1) / chunk - 1))
	local k off n t0 free_gb datadir min_free=${QC_SCALE_MIN_FREE_GB:-15}
	local fifo until=""
	[ -n "${QC_SCALE_UNTIL:-}" ] && until=$(date -u -d "$QC_SCALE_UNTIL" +%s)
	datadir=$(sql -N -e "SELECT @@datadir")
	fifo=$(mktemp -u /tmp/ledger-scale-fifo.XXXXXX)
	for ((k = last; k >= 0; k--)); do
		off=$((k * chunk))
		n=$((rows - off < chunk ? rows - off : chunk))
		if [ -n "$(sql -N "$db" -e "SELECT 1 FROM quota_usage WHERE id = $((off + 1))")" ]; then
			continue
		fi
		free_gb=$(df --output=avail -BG "$datadir" | tail -1 | tr -dc 0-9)
		if ((free_gb < min_free)); then
			say "fill: stopped, $free_gb GB free on $datadir (QC_SCALE_MIN_FREE_GB=$min_free)"
			return 0
		fi
		if [ -n "$until" ] && (($(date -u +%s) >= until)); then
			say "fill: stopped at QC_SCALE_UNTIL, chunks 0…$k not loaded"
			return 0
		fi
		t0=$SECONDS
		mkfifo "$fifo"
		"$gen" gen -total "$rows" -from $((off + 1)) -to $((off + n)) -tend "$t_end" -span "$span" >"$fifo" &
		sql --local-infile=1 "$db" -e "SET SESSION unique_checks = 0, foreign_key_checks = 0, sql_log_bin = 0;
			LOAD DATA LOCAL INFILE '$fifo' INTO TABLE quota_usage ($("$gen" gen -columns))"
		wait $!
		rm -f "$fifo"
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
	go build -o "$gen" ./scripts/ledgerscale
	# Durable commits, as in production (a stopped fill left them at 2).
	sql -e "SET GLOBAL innodb_flush_log_at_trx_commit = 1"
	sql -e "SELECT table_rows, ROUND(data_length/1e9, 1) AS data_gb, ROUND(index_length/1e9, 1) AS index_gb
		FROM information_schema.tables WHERE table_schema = '$db' AND table_name = 'quota_usage'"
	sql -e "DROP DATABASE IF EXISTS qc_scale_empty; CREATE DATABASE qc_scale_empty"
	QC_MYSQL_DSN="root@tcp($hostport)/qc_scale_empty" "$bin" migrate >&2
	"$gen" -dsn "root@tcp($hostport)/qc_scale_empty" -slowlog "$slow" -label "empty ledger" -resource "${resource:-res-0}"
	sql -e "DROP DATABASE qc_scale_empty"
	"$gen" -dsn "$dsn" -slowlog "$slow" -label "filled ledger ($db)" -resource "${resource:-res-0}"
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
