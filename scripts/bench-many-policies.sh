#!/usr/bin/env bash
# scripts/bench-many-policies.sh — the many-policies scenario (issue 23 §1),
# run by scripts/bench.sh (`make bench`) after the server benchmarks, or
# alone. Prints a Markdown section on stdout (bench.sh appends it to
# docs/performance.md); progress goes to stderr.
#
# One quota-center (--active-window 1m) on the real Redis and MariaDB (a
# fresh database qc_bench_many, dropped at the end); `qc-bench
# many-policies` creates QC_BENCH_MANY_POLICIES policies through the admin
# API, waits until they are idle (the window plus 10 s), then measures three
# phases of QC_BENCH_MANY_PHASE each: idle (no traffic), load (apply →
# finish sessions on 1 % of the resources, 50 connections), after (no
# traffic, the loaded resources still active) and quiet (the next phase:
# still used, unchanged since every loop's visit after the load). Each phase reports Redis
# commands/s (INFO commandstats deltas), MySQL statements/s (Questions),
# the slowest of three /metrics scrapes, its size and samples, the
# server's heap in use and RSS, and at the phase's end its live heap (a GC
# forced through --pprof-addr, on the server's port + 1000).
#
# Environment:
#   QC_BENCH_MANY_POLICIES  policies to create                      (default 100000)
#   QC_BENCH_MANY_PHASE     length of each measured phase           (default 20s)
#   QC_BENCH_MANY_ACTIVE_PERCENT percent of the policies the load uses (default 1; 10 with
#                           10,000 policies gives the 1,000 used resources of 100,000 at 1 %)
#   QC_BENCH_MANY_PORT      quota-center's port on 127.0.0.1        (default 18096)
#   QC_BENCH_MANY_DB        the database it creates and drops       (default qc_bench_many)
#   QC_BENCH_MANY_SERVE_ARGS extra flags for quota-center serve     (default none)
#   QC_BENCH_MANY_BUILD     0 = use bin/quota-center and bin/qc-bench as built (bench.sh
#                           built them)                             (default 1)
#   QC_BENCH_REDIS, QC_BENCH_MYSQL_HOST as in bench.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

policies=${QC_BENCH_MANY_POLICIES:-100000}
phase=${QC_BENCH_MANY_PHASE:-20s}
active_percent=${QC_BENCH_MANY_ACTIVE_PERCENT:-1}
port=${QC_BENCH_MANY_PORT:-18096}
read -r -a serve_args <<<"${QC_BENCH_MANY_SERVE_ARGS:-}"
redis=${QC_BENCH_REDIS:-127.0.0.1:6379}
mysql_hostport=${QC_BENCH_MYSQL_HOST:-127.0.0.1:3306}
mysql_host=${mysql_hostport%:*} mysql_port=${mysql_hostport##*:}
db=${QC_BENCH_MANY_DB:-qc_bench_many}
url=http://127.0.0.1:$port
window=1m

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench-many-policies: %s\n' "$*" >&2; exit 1; }
sql() { mariadb --protocol=tcp -h "$mysql_host" -P "$mysql_port" -uroot --connect-timeout=3 -N -B "$@"; }

work=$(mktemp -d)
qc_pid=""
cleanup() {
	[[ -n $qc_pid ]] && kill "$qc_pid" 2>/dev/null && wait "$qc_pid" 2>/dev/null || true
	sql -e "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [[ ${QC_BENCH_MANY_BUILD:-1} != 0 ]]; then
	say "go build bin/quota-center bin/qc-bench"
	mkdir -p bin
	go build -trimpath -o bin/quota-center ./cmd/quota-center
	go build -trimpath -o bin/qc-bench ./cmd/qc-bench
fi
sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
QC_ADMIN_TOKENS="bench:$token" bin/quota-center serve --http-addr "127.0.0.1:$port" --redis-addr "$redis" \
	--mysql-dsn "root@tcp($mysql_host:$mysql_port)/$db" --migrate-on-start --log-level warn --insecure-open-quota \
	--active-window "$window" --pprof-addr "127.0.0.1:$((port + 1000))" "${serve_args[@]}" >"$work/qc.log" 2>&1 &
qc_pid=$!
for _ in $(seq 100); do curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && break; sleep 0.2; done
curl -fsS -o /dev/null "$url/readyz" || die "quota-center did not get ready: $(tail -5 "$work/qc.log")"

say "qc-bench many-policies: $policies policies, phases of $phase"
bin/qc-bench many-policies --url "$url" --admin-token "$token" --redis-addr "$redis" \
	--mysql-dsn "root@tcp($mysql_host:$mysql_port)/$db" --prefix "mp-$(date +%s)" --policies "$policies" \
	--active-percent "$active_percent" --connections 50 --idle-after 70s --phase "$phase" --pprof-url "http://127.0.0.1:$((port + 1000))" >"$work/result.json" ||
	die "qc-bench many-policies failed; server log: $(tail -5 "$work/qc.log")"
result=$(cat "$work/result.json")
rss_peak=$(ps -o rss= -p "$qc_pid" | tr -d ' ')

# j EXPR: a jq-less read of the result (python3 is on every bench machine).
j() { python3 -c "import json,sys; r=json.load(sys.stdin); print($1)" <<<"$result"; }
echo
echo "## Many policies: $(j "'{:,}'.format(r['policies'])") policies, load on $active_percent % (scripts/bench-many-policies.sh)"
echo
echo "quota-center $(git describe --always --dirty 2>/dev/null || echo dev), one instance, --active-window $window, defaults otherwise (per-resource histograms off);"
echo "$(j "'{:,}'.format(r['policies'])") COUNT policies created through PUT /admin/policies in $(j "'%.0f' % r['create_s']") s, then left idle 70 s."
echo "Phases of $phase each; Redis commands/s are every client's (INFO commandstats deltas, the benchmark's INFO left out),"
echo "MySQL statements/s are the server's Questions; the scrape is the slowest of three."
echo
echo "| phase | Redis commands/s | MySQL statements/s | /metrics scrape | bytes | samples | heap in use | heap live (after a forced GC) | RSS |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for p in idle load after quiet; do
	j "'| $p | %.1f | %.1f | %.0f ms | %s | %s | %.0f MiB | %.0f MiB | %.0f MiB |' % (r['$p']['redis_cmds_per_s'], r['$p'].get('mysql_statements_per_s', 0), r['$p']['scrape_s']*1000, '{:,}'.format(r['$p']['scrape_bytes']), '{:,}'.format(r['$p']['samples']), r['$p']['heap_inuse_bytes']/1048576, r['$p'].get('heap_live_bytes', 0)/1048576, r['$p']['rss_bytes']/1048576)"
done
echo
echo "Load: $(j "'%.0f' % r['sessions_per_s']") sessions/s (apply → finish) on $(j "'{:,}'.format(r['active_resources'])") resources, $(j "r['errors']") errors;"
echo "idle, after and quiet are background work only (no request). quota-center's RSS at the end: $((rss_peak / 1024)) MiB."
echo
echo '```'
echo "$result"
echo '```'
