#!/usr/bin/env bash
# scripts/bench-gateway.sh — ShouldRateLimit throughput of quota-center's
# gateway (internal/gateway) against envoyproxy/ratelimit's own gRPC
# endpoint, in the same run, with ghz. Not part of `make test`; the figures
# go to docs/performance-notes.md by hand (make bench appends that file to
# docs/performance.md).
#
# Starts, on ports of its own: quota-center on the real Redis and a fresh
# MariaDB database (qc_bench_gw) with --grpc-addr and a one-descriptor
# mapping, and envoyproxy/ratelimit (QC_BENCH_PEER_RATELIMIT, built from its
# source outside this repository) on the same Redis with its own key prefix.
# Then, interleaved, REPS runs of each: ghz with C concurrent calls over
# CONNS HTTP/2 connections for DURATION, one descriptor per request
# (hits_addend 1), against a limit neither reaches. For each run it reads
# the CPU time (utime+stime, /proc) of the server, of redis-server and of
# mariadbd, and prints a Markdown table: requests/s, p50/p99 latency, CPU
# µs per request of each process. It removes its keys and database and
# stops what it started on exit.
#
# Environment:
#   QC_BENCH_PEER_RATELIMIT  envoyproxy/ratelimit binary (required)
#   QC_BENCH_GW_DURATION     each run (default 10s)
#   QC_BENCH_GW_REPS         runs per server (default 2)
#   QC_BENCH_GW_C            concurrent calls (default 50)
#   QC_BENCH_GW_CONNS        gRPC connections (default 2)
#   QC_BENCH_GW_PORT         first of the ports used: quota-center HTTP,
#                            gRPC, ratelimit HTTP, gRPC, debug (default 18190)
#   QC_BENCH_REDIS           Redis host:port (default 127.0.0.1:6379)
#   QC_BENCH_MYSQL_HOST      MariaDB host:port, root, no password (default 127.0.0.1:3306)
#   QC_BENCH_GW_BUILD        0 = use bin/quota-center as it is (scripts/bench.sh built it)
#   QC_BENCH_GW_PROFILE      a directory: quota-center serves pprof (on the
#                            port after the debug one) and each of its runs
#                            leaves a CPU profile there (qc-N.pprof, `go tool
#                            pprof -top bin/quota-center DIR/qc-1.pprof`)
#   GHZ                      ghz binary (default: ghz on PATH or in $(go env GOPATH)/bin;
#                            go install github.com/bojand/ghz/cmd/ghz@latest)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

peer_bin=${QC_BENCH_PEER_RATELIMIT:?set QC_BENCH_PEER_RATELIMIT to an envoyproxy/ratelimit binary}
duration=${QC_BENCH_GW_DURATION:-10s}
reps=${QC_BENCH_GW_REPS:-2}
conc=${QC_BENCH_GW_C:-50}
conns=${QC_BENCH_GW_CONNS:-2}
port=${QC_BENCH_GW_PORT:-18190}
redis=${QC_BENCH_REDIS:-127.0.0.1:6379}
mysql_hostport=${QC_BENCH_MYSQL_HOST:-127.0.0.1:3306}
ghz=${GHZ:-$(command -v ghz || echo "$(go env GOPATH)/bin/ghz")}
db=qc_bench_gw
run_id=$(date +%s)
res=gwbench-$run_id
prefix=qcgwbench_${run_id}_

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench-gateway: %s\n' "$*" >&2; exit 1; }
sql() { mariadb --protocol=tcp -h "${mysql_hostport%:*}" -P "${mysql_hostport##*:}" -uroot -N -B "$@"; }
rcli() { redis-cli -h "${redis%:*}" -p "${redis##*:}" "$@"; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; } # clock ticks
[[ -x $peer_bin ]] || die "$peer_bin is not an executable"
[[ -x $ghz ]] || die "ghz not found (go install github.com/bojand/ghz/cmd/ghz@latest)"
command -v jq >/dev/null || die "jq is not installed"
hz=$(getconf CLK_TCK)

work=$(mktemp -d "${TMPDIR:-/tmp}/qc-bench-gw.XXXXXX")
qc_pid="" peer_pid=""
stop() {
	local pid=$1 i
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	stop "$qc_pid"
	stop "$peer_pid"
	local p
	for p in "qc:{$res}:*" "${prefix}*"; do
		rcli --scan --pattern "$p" | xargs -r redis-cli -h "${redis%:*}" -p "${redis##*:}" del >/dev/null || true
	done
	sql -e "DROP DATABASE IF EXISTS $db" || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

if [[ ${QC_BENCH_GW_BUILD:-1} != 0 ]]; then
	say "building bin/quota-center"
	go build -o bin/quota-center ./cmd/quota-center
fi
say "building the protoset"
go run scripts/gateway/protoset.go "$work/rls.protoset"

sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
cat >"$work/gateway.yaml" <<EOF
domains:
  - domain: qcbench
    descriptors:
      - {key: resource, value: r, resource: $res}
EOF
profile=${QC_BENCH_GW_PROFILE:-}
pprof_flag=()
if [[ -n $profile ]]; then
	mkdir -p "$profile"
	pprof_flag=(--pprof-addr "127.0.0.1:$((port + 5))")
fi
admin=bench-admin-$run_id-$RANDOM$RANDOM
QC_ADMIN_TOKENS="bench:$admin" ./bin/quota-center serve --http-addr "127.0.0.1:$port" --grpc-addr "127.0.0.1:$((port + 1))" \
	--gateway-config "$work/gateway.yaml" --redis-addr "$redis" --mysql-dsn "root@tcp($mysql_hostport)/$db" \
	--migrate-on-start --insecure-open-quota --log-level warn "${pprof_flag[@]}" >"$work/qc.log" 2>&1 &
qc_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
	-d '{"quotaType":"COUNT","totalLimit":9007199254740991,"resetCron":"@daily"}' \
	"http://127.0.0.1:$port/admin/policies/$res" >/dev/null || { tail "$work/qc.log"; die "quota-center did not start"; }

mkdir -p "$work/rl/bench/config"
printf 'domain: qcbench\ndescriptors:\n  - key: resource\n    value: r\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1000000000\n' >"$work/rl/bench/config/bench.yaml"
USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="$redis" CACHE_KEY_PREFIX="$prefix" \
	RUNTIME_ROOT="$work/rl" RUNTIME_SUBDIRECTORY=bench RUNTIME_WATCH_ROOT=false \
	HOST=127.0.0.1 PORT="$((port + 2))" GRPC_HOST=127.0.0.1 GRPC_PORT="$((port + 3))" \
	DEBUG_HOST=127.0.0.1 DEBUG_PORT="$((port + 4))" "$peer_bin" >"$work/rl.log" 2>&1 &
peer_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((port + 2))/healthcheck" >/dev/null && break; sleep 0.1; done

redis_pid=$(rcli info server | awk -F: '/^process_id/{print $2}' | tr -d '\r')
# The server's own pid (other engineers' mariadbd may run on the machine).
mysql_pid=$(cat "$(sql -e 'SELECT @@pid_file')" 2>/dev/null || pidof mariadbd || pidof mysqld || echo 0)
mysql_pid=${mysql_pid%% *}
data='{"domain":"qcbench","descriptors":[{"entries":[{"key":"resource","value":"r"}]}]}'

# MariaDB's counters of what a request costs it (SHOW GLOBAL STATUS).
counters="'Com_stmt_execute','Com_insert','Com_select','Com_commit','Handler_write','Handler_read_key','Innodb_data_fsyncs','Innodb_os_log_written','Questions'"
status() { sql -e "SHOW GLOBAL STATUS WHERE Variable_name IN ($counters)" | sort; }
# statusRow LABEL N BEFORE AFTER: the counters' deltas per request.
statusRow() {
	join <(printf '%s\n' "$3") <(printf '%s\n' "$4") | sort |
		awk -v l="$1" -v n="$2" 'BEGIN { printf "| %s", l } { printf " | %s %.3g", $1, ($3 - $2) / n } END { print " |" }' >>"$work/status.md"
}
qc_runs=0

# run LABEL PID ADDR: one ghz run; prints a table row.
run() {
	local label=$1 pid=$2 addr=$3 c0 r0 m0 c1 r1 m1 out n
	"$ghz" --insecure --protoset "$work/rls.protoset" --call envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit \
		-d "$data" -c 10 --connections "$conns" -z 2s "$addr" >/dev/null 2>&1 || true # warm-up
	local s0 s1 prof=""
	s0=$(status)
	if [[ -n $profile && $pid == "$qc_pid" ]]; then
		qc_runs=$((qc_runs + 1))
		curl -sf -o "$profile/qc-$qc_runs.pprof" \
			"http://127.0.0.1:$((port + 5))/debug/pprof/profile?seconds=$((${duration%s} - 1))" &
		prof=$!
	fi
	c0=$(cpu "$pid") r0=$(cpu "$redis_pid") m0=$(cpu "$mysql_pid")
	out=$("$ghz" --insecure --protoset "$work/rls.protoset" --call envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit \
		-d "$data" -c "$conc" --connections "$conns" -z "$duration" --format json "$addr")
	c1=$(cpu "$pid") r1=$(cpu "$redis_pid") m1=$(cpu "$mysql_pid")
	n=$(jq '.count' <<<"$out")
	s1=$(status)
	[[ -z $prof ]] || wait "$prof" || true
	statusRow "$label" "$n" "$s0" "$s1"
	jq -r --arg l "$label" --argjson n "$n" --argjson hz "$hz" \
		--argjson c "$((c1 - c0))" --argjson r "$((r1 - r0))" --argjson m "$((m1 - m0))" \
		'"| \($l) | \(.rps | floor) | \((.latencyDistribution[] | select(.percentage == 50) | .latency) / 1e6 * 100 | floor / 100) | \((.latencyDistribution[] | select(.percentage == 99) | .latency) / 1e6 * 100 | floor / 100) | \(($c / $hz * 1e6 / $n) | floor) | \(($r / $hz * 1e6 / $n) | floor) | \(($m / $hz * 1e6 / $n) | floor) | \((.statusCodeDistribution.OK // 0) * 100 / $n | floor) % |"' <<<"$out"
}

echo "| server | req/s | p50 ms | p99 ms | server CPU µs/req | redis CPU µs/req | mariadb CPU µs/req | OK |"
echo "|---|---|---|---|---|---|---|---|"
for ((i = 1; i <= reps; i++)); do
	run "envoyproxy/ratelimit" "$peer_pid" "127.0.0.1:$((port + 3))"
	run "quota-center" "$qc_pid" "127.0.0.1:$((port + 1))"
done
rows=$(sql -e "SELECT COUNT(*), COALESCE(SUM(charged_amount), 0) FROM $db.quota_usage WHERE resource_name = '$res'")
echo
echo "MariaDB's counters per request (SHOW GLOBAL STATUS deltas over each run; other databases' work on the same server counts too):"
echo
cat "$work/status.md"
echo
echo "quota-center ledger: rows, charged = $rows (a FINISHED row per client, resource and period of each group commit, warm-ups included)"
echo "ghz $("$ghz" --version 2>&1 | head -1), -c $conc --connections $conns -z $duration, $reps interleaved runs each; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
