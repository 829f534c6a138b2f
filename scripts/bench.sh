#!/usr/bin/env bash
# scripts/bench.sh — the load benchmark behind `make bench` (issue 4). Not
# part of `make test`.
#
# Builds bin/quota-center, bin/qc-baseline and bin/qc-bench; creates a fresh
# MariaDB database qc_bench; starts quota-center on the real Redis and
# MariaDB and, beside it, qc-baseline (the same Lua scripts once per request,
# no ledger) on the same Redis, baseline+ledger (qc-baseline --mysql-dsn: the
# same scripts through quota-center's auto-pipelined Redis path, plus the
# ledger row through quota-center's group commit, in a database
# of its own; scripts/bench-floor.sh) and envoyproxy/ratelimit when
# QC_BENCH_PEER_RATELIMIT names its binary. First the headline runs (issue
# 11): wrk (Debian's `wrk`; installed with apt-get when missing and run as
# root) with the Lua scripts of scripts/wrk/, for each scenario ×
# connection count, repetitions interleaved (baseline, baseline+ledger,
# [ratelimit,] quota-center, then the order turned by one each rep),
# recording the CPU of every process per
# answer. Then,
# for each scenario × connection count, the qc-bench runs (issue 4),
# interleaved the same way, recording each process's CPU over the measured
# window and quota-center's RSS and goroutines. Then a long run of quota-center alone
# (memory and goroutine growth) and the in-process `go test -bench` handler
# benchmarks. It writes docs/performance.md and stops everything it started
# on exit, including on Ctrl-C.
#
# Needs Redis and MariaDB already running (as .ci/run starts them), curl,
# redis-cli, the mariadb client and wrk. Takes about
# scenarios × connections × reps × 2 × (duration + warm-up + ~2 s) + the long
# run + the go benchmarks + ~1 min of clean-up: about 15 minutes with the
# defaults, and up to 8 more when other work keeps the machine busy (each
# run then waits up to QC_BENCH_QUIET_WAIT for it).
#
# Environment:
#   QC_BENCH_WRK_SCENARIOS wrk scenarios (scripts/wrk/*.lua)       (default "apply session heartbeat pools"; "" = none)
#                         pools (issue 13 §8): applies on a resource with 12
#                         business lines, interleaved with the same applies
#                         on a plain resource (server "quota-center-plain")
#   QC_BENCH_WRK_DURATION  measured time of each wrk run           (default 8s)
#   QC_BENCH_WRK_WARMUP    unmeasured wrk load before each run     (default 2s)
#   QC_BENCH_WRK_THREADS   wrk threads                             (default 2)
#   QC_BENCH_WRK_SETTLE    pause between a wrk warm-up and its measured run,
#                          for every server alike (default 6s, as
#                          scripts/cpu-per-apply.sh): quota-center's catch-up
#                          reads the rows opened since a balance was seeded
#                          5 s after its first apply (internal/quota
#                          catchup.go), and the give-backs of requests wrk
#                          cut off run for 3 s; without it they landed in
#                          quota-center's first measured rep (0.69 rows read
#                          per answer, owncpu's measurement of 4 December)
#   QC_BENCH_PEER_RATELIMIT path of an envoyproxy/ratelimit binary built from
#                         its source (github.com/envoyproxy/ratelimit,
#                         src/service_cmd; never part of this repository): it
#                         runs beside the others on the same Redis and is
#                         measured in the apply scenario   (default none)
#   QC_BENCH_PEER_PORT    its HTTP port on 127.0.0.1 (it also takes the next
#                         two for gRPC and debug)              (default 18083)
#   QC_BENCH_FLOOR        0 = no baseline+ledger server; else it runs in the
#                         apply and session wrk scenarios      (default 1)
#   QC_BENCH_FLOOR_PORT   its port on 127.0.0.1                (default 18086)
#   QC_BENCH_FLOOR_DB     its MariaDB database, created and dropped (default QC_BENCH_DB_floor)
#   QC_BENCH_REPS         repetitions per server and cell          (default 3)
#   QC_BENCH_DURATION     measured time of each run                 (default 10s)
#   QC_BENCH_WARMUP       unmeasured load before each run           (default 2s)
#   QC_BENCH_CONNECTIONS  connection counts                         (default "50 200")
#   QC_BENCH_SCENARIOS    qc-bench scenarios                        (default "apply session heartbeat-session heartbeat"; "" = none)
#   QC_BENCH_SOAK         long run of quota-center, 0 = skip        (default 60s)
#   QC_BENCH_GOBENCH      go test -bench -benchtime, 0 = skip       (default 1s)
#   QC_BENCH_REDIS        Redis host:port                           (default 127.0.0.1:6379)
#   QC_BENCH_MYSQL_HOST   MariaDB host:port, user root, no password (default 127.0.0.1:3306)
#   QC_BENCH_QC_PORT      quota-center's port on 127.0.0.1          (default 18080)
#   QC_BENCH_BASE_PORT    qc-baseline's port on 127.0.0.1           (default 18081)
#   QC_BENCH_OUT          report path                               (default docs/performance.md)
#   QC_BENCH_QUIET_WAIT   seconds each run may wait for the machine to go
#                         quiet (other work below 0.3 core) before it starts (default 10)
#   QC_BENCH_FRESH        fresh backends per scenario (issue 23 §3): before each
#                         wrk scenario after the first and before the qc-bench
#                         runs, stop every server, empty Redis, drop and make
#                         the ledgers again, start the servers again. "flush" =
#                         FLUSHDB (point QC_BENCH_REDIS at a Redis of the
#                         benchmark alone), "keys" = UNLINK this run's keys
#                         only, 0 = one start for every scenario
#                         (default flush; keys when QC_BENCH_REDIS is the
#                         machine's shared 127.0.0.1:6379)
#   QC_BENCH_FRESH_REPS   wrk scenarios whose every rep after the first starts
#                         on fresh backends too (as above): the apply
#                         scenario never finishes a session, so without it
#                         each rep ran on the ~100,000 open sessions and rows
#                         per server of every rep before it, and Redis's and
#                         MariaDB's CPU per apply grew rep after rep (issue 23
#                         §3, docs/performance.md "The packed session record, and fresh
#                         backends per rep").
#                         Not heartbeat (its sessions are opened once).
#                         (default "apply"; "" = none)
#   QC_BENCH_GATEWAY      0 = skip the gateway runs; else, with
#                         QC_BENCH_PEER_RATELIMIT and ghz (GHZ, PATH or
#                         $(go env GOPATH)/bin), scripts/bench-gateway.sh runs
#                         after the wrk scenarios on fresh backends and its
#                         table is appended to the report (issue 23 §3)  (default 1)
#   QC_BENCH_KEEP         1 = keep the qc_bench database and the benchmark's Redis keys
#   QC_BENCH_DB           the MariaDB database it creates and drops  (default qc_bench)
#   QC_BENCH_SERVE_ARGS   extra flags for quota-center serve, e.g.
#                         "--redis-pipeline-max-calls 0" to measure without
#                         auto-pipelining                           (default none)
#   QC_BENCH_BEFORE       a git revision: the handler benchmarks
#                         (internal/httpapi/bench_test.go) also run on it, in a
#                         temporary worktree, and benchstat compares the two
#                         (default none: this tree only)
#   QC_BENCH_NOTES        Markdown appended to the report        (default docs/performance-notes.md)
#   QC_BENCH_MANY_POLICIES policies of scripts/bench-many-policies.sh (issue 23 §1:
#                         idle background work, /metrics size and time, heap and RSS
#                         with load on 1 %), appended last; 0 = skip  (default 100000)
#   QC_BENCH_SDK          0 = skip scripts/bench-sdk.sh (the Go SDK's LocalPool and
#                         qc-replay --local-batch section, appended last)  (default 1)
#
# quota-center refuses /admin/* without an admin token outside dev mode: the
# script gives it a random one (QC_ADMIN_TOKENS, in its environment only) to
# create the policy with. No API keys are set, so /quota/* is open.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

reps=${QC_BENCH_REPS:-3}
duration=${QC_BENCH_DURATION:-10s}
warmup=${QC_BENCH_WARMUP:-2s}
conns_list=${QC_BENCH_CONNECTIONS:-"50 200"}
scenarios=${QC_BENCH_SCENARIOS-"apply session heartbeat-session heartbeat"}
wrk_scenarios=${QC_BENCH_WRK_SCENARIOS-"apply session heartbeat pools"}
wrk_duration=${QC_BENCH_WRK_DURATION:-8s}
wrk_warmup=${QC_BENCH_WRK_WARMUP:-2s}
wrk_settle=${QC_BENCH_WRK_SETTLE:-6s}
wrk_threads=${QC_BENCH_WRK_THREADS:-2}
peer_bin=${QC_BENCH_PEER_RATELIMIT:-}
peer_port=${QC_BENCH_PEER_PORT:-18083}
soak=${QC_BENCH_SOAK:-60s}
gobench=${QC_BENCH_GOBENCH:-1s}
redis=${QC_BENCH_REDIS:-127.0.0.1:6379}
mysql_hostport=${QC_BENCH_MYSQL_HOST:-127.0.0.1:3306}
qc_port=${QC_BENCH_QC_PORT:-18080}
base_port=${QC_BENCH_BASE_PORT:-18081}
qc2_port=${QC_BENCH_QC2_PORT:-18082}
two_scenarios=${QC_BENCH_TWO-apply session}
out=${QC_BENCH_OUT:-docs/performance.md}
keep=${QC_BENCH_KEEP:-0}
quiet_wait=${QC_BENCH_QUIET_WAIT:-10}
fresh_mode=${QC_BENCH_FRESH:-}
fresh_reps=" ${QC_BENCH_FRESH_REPS-apply} "
gateway_on=${QC_BENCH_GATEWAY:-1}
read -r -a serve_args <<<"${QC_BENCH_SERVE_ARGS:-}"
before=${QC_BENCH_BEFORE:-}
notes=${QC_BENCH_NOTES:-docs/performance-notes.md}
# Sessions of the apply-only scenario are never finished. With the default
# leak threshold (300 s) the sweeper would start charging them in the middle
# of the later scenarios, so the benchmark's policy keeps them for an hour;
# the sweeper's own cost is measured by the scale test (docs/performance.md).
leak_threshold=3600
db=${QC_BENCH_DB:-qc_bench}
limit=9007199254740991 # 2^53-1: the largest limit; never reached

redis_host=${redis%:*} redis_port=${redis##*:}
if [[ -z $fresh_mode ]]; then
	fresh_mode=flush
	[[ $redis == 127.0.0.1:6379 ]] && fresh_mode=keys # the machine's shared Redis: only this run's keys
fi
mysql_host=${mysql_hostport%:*} mysql_port=${mysql_hostport##*:}
qc_url=http://127.0.0.1:$qc_port
base_url=http://127.0.0.1:$base_port
run_id=$(date +%s)
qc_res=bench-qc-$run_id
qc_pool_res=bench-pools-$run_id
base_res=bench-base-$run_id
# shellcheck source=scripts/bench-floor.sh
source scripts/bench-floor.sh

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }
rcli() { redis-cli -h "$redis_host" -p "$redis_port" "$@"; }
sql() { mariadb --protocol=tcp -h "$mysql_host" -P "$mysql_port" -uroot --connect-timeout=3 -N -B "$@"; }
port_busy() { timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null; }

[[ $fresh_mode == flush || $fresh_mode == keys || $fresh_mode == 0 ]] || die "QC_BENCH_FRESH=$fresh_mode: want flush, keys or 0"
[[ $fresh_reps != *" heartbeat "* ]] || die "QC_BENCH_FRESH_REPS cannot list heartbeat: its sessions are opened once per scenario"
for tool in go curl redis-cli mariadb; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done
if [[ -n $wrk_scenarios ]] && ! command -v wrk >/dev/null; then
	# Debian's wrk package (wrk 4, with LuaJIT).
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		say "installing wrk (apt-get install wrk)"
		apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq wrk >/dev/null 2>&1; } ||
			die "apt-get install wrk failed"
	fi
	command -v wrk >/dev/null || die "wrk is not installed (Debian: apt-get install wrk)"
fi
if [[ -n $peer_bin ]]; then
	[[ -x $peer_bin ]] || die "QC_BENCH_PEER_RATELIMIT=$peer_bin is not an executable"
	for p in "$peer_port" "$((peer_port + 1))" "$((peer_port + 2))"; do
		port_busy "$p" && die "127.0.0.1:$p is in use; set QC_BENCH_PEER_PORT"
	done
fi
[[ $(rcli ping 2>/dev/null) == PONG ]] ||
	die "Redis does not answer at $redis (start it as .ci/run does: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no)"
sql -e 'SELECT 1' >/dev/null 2>&1 ||
	die "MariaDB does not answer at $mysql_hostport as root without a password (start it as .ci/run does)"
for p in "$qc_port" "$base_port" "$qc2_port"; do
	port_busy "$p" && die "127.0.0.1:$p is in use; set QC_BENCH_QC_PORT / QC_BENCH_BASE_PORT"
done
floor_check

work=$(mktemp -d "${TMPDIR:-/tmp}/qc-bench.XXXXXX")
results=$work/results.jsonl wrk_results=$work/wrk.jsonl soak_results=$work/soak.jsonl two_results=$work/two.jsonl meta=$work/meta.txt gobench_out=$work/gobench.txt
: >"$results"
: >"$wrk_results"
: >"$meta"
qc_pid="" base_pid="" qc2_pid="" peer_pid=""

# stop PID NAME: TERM, wait up to 20 s, then KILL. Only our own children.
stop() {
	local pid=$1 name=$2 i
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
	say "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop "$qc_pid" quota-center
	stop "$qc2_pid" "the second quota-center"
	stop "$base_pid" qc-baseline
	stop "$peer_pid" ratelimit
	qc_pid="" base_pid="" qc2_pid="" peer_pid=""
	floor_cleanup
	if [[ $keep != 1 ]]; then
		say "removing the benchmark's Redis keys and the $db database (QC_BENCH_KEEP=1 keeps them)"
		for r in "$qc_res" "$base_res"; do
			rcli --scan --pattern "qc:{$r}:*" 2>/dev/null | xargs -r -n 500 echo UNLINK | rcli >/dev/null 2>&1 || true
		done
		rcli --scan --pattern "qcbench_resource_r${run_id}_*" 2>/dev/null | xargs -r -n 500 echo UNLINK | rcli >/dev/null 2>&1 || true
		sql -e "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
	fi
	((rc == 0)) || printf 'bench: failed (exit %d); logs and raw results in %s\n' "$rc" "$work" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# busy_cores: cores the machine kept busy over one second (all processes; ours
# are idle between runs).
busy_cores() {
	local t0 i0 t1 i1
	read -r t0 i0 < <(awk '/^cpu / {t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6}' /proc/stat)
	sleep 1
	read -r t1 i1 < <(awk '/^cpu / {t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6}' /proc/stat)
	awk -v dt="$((t1 - t0))" -v di="$((i1 - i0))" -v n="$(nproc)" 'BEGIN {printf "%.2f", (dt > 0 ? (dt - di) / dt * n : 0)}'
}

# wait_quiet: waits up to quiet_wait seconds for other work on the machine to
# drop below 0.3 core, so that a run measures our processes, not a neighbour's
# build. Counts the runs that had to start anyway.
noisy_starts=0
wait_quiet() {
	local deadline=$((SECONDS + quiet_wait)) b
	while :; do
		b=$(busy_cores)
		awk -v b="$b" 'BEGIN {exit !(b < 0.3)}' && return 0
		if ((SECONDS >= deadline)); then
			noisy_starts=$((noisy_starts + 1))
			printf '(machine still busy: %s cores) ' "$b" >&2
			return 0
		fi
	done
}

# wait_ready URL: polls URL until it answers 200, 60 s at most.
wait_ready() {
	local i
	for ((i = 0; i < 300; i++)); do
		curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}

version=$(git describe --always --dirty 2>/dev/null || echo dev)
say "go build bin/quota-center bin/qc-baseline bin/qc-bench ($version)"
mkdir -p bin
go build -trimpath -ldflags "-X main.version=$version" -o bin/quota-center ./cmd/quota-center
go build -trimpath -o bin/qc-baseline ./cmd/qc-baseline
go build -trimpath -o bin/qc-bench ./cmd/qc-bench

qc_flags=(serve --http-addr "127.0.0.1:$qc_port" --redis-addr "$redis"
	--mysql-dsn "root@tcp($mysql_host:$mysql_port)/$db" --migrate-on-start --log-level warn --insecure-open-quota "${serve_args[@]}")
admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

# put_policy RESOURCE: the benchmark's COUNT policy on quota-center.
put_policy() {
	curl -fsS -o /dev/null -H "Authorization: Bearer $admin_token" -X PUT -H 'Content-Type: application/json' \
		-d "{\"quotaType\":\"COUNT\",\"totalLimit\":$limit,\"leakThresholdSeconds\":$leak_threshold}" "$qc_url/admin/policies/$1" ||
		die "PUT /admin/policies/$1 failed"
}

# start_servers [peer]: a fresh database $db, then quota-center (it
# migrates it), qc-baseline, baseline+ledger and, with "peer" and
# QC_BENCH_PEER_RATELIMIT, envoyproxy/ratelimit; then the policies.
start_servers() {
	say "fresh database $db"
	sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
	say "starting quota-center on $qc_url (Redis $redis, MariaDB $mysql_hostport/$db)"
	QC_ADMIN_TOKENS="bench:$admin_token" bin/quota-center "${qc_flags[@]}" >>"$work/quota-center.log" 2>&1 &
	qc_pid=$!
	wait_ready "$qc_url/readyz" || { tail -20 "$work/quota-center.log" >&2; die "quota-center did not get ready"; }

	say "starting qc-baseline on $base_url"
	bin/qc-baseline --addr "127.0.0.1:$base_port" --redis-addr "$redis" --resource "$base_res" --lease "${leak_threshold}s" >>"$work/qc-baseline.log" 2>&1 &
	base_pid=$!
	wait_ready "$base_url/healthz" || { tail -20 "$work/qc-baseline.log" >&2; die "qc-baseline did not start"; }
	floor_start

	if [[ ${1:-} == peer && -n $peer_bin ]]; then
		# envoyproxy/ratelimit on the same Redis: one descriptor with a limit
		# it never reaches, no statsd, file config under $work.
		say "starting envoyproxy/ratelimit ($peer_bin) on 127.0.0.1:$peer_port"
		mkdir -p "$work/ratelimit/bench/config"
		printf 'domain: qcbench\ndescriptors:\n  - key: resource\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1000000000\n' \
			>"$work/ratelimit/bench/config/bench.yaml"
		USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="$redis" \
			RUNTIME_ROOT="$work/ratelimit" RUNTIME_SUBDIRECTORY=bench RUNTIME_WATCH_ROOT=false \
			HOST=127.0.0.1 PORT="$peer_port" GRPC_HOST=127.0.0.1 GRPC_PORT="$((peer_port + 1))" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="$((peer_port + 2))" "$peer_bin" >>"$work/ratelimit.log" 2>&1 &
		peer_pid=$!
		wait_ready "http://127.0.0.1:$((peer_port + 2))/healthcheck" || wait_ready "http://127.0.0.1:$peer_port/healthcheck" ||
			{ tail -20 "$work/ratelimit.log" >&2; die "envoyproxy/ratelimit did not get ready"; }
	fi

	say "policy $qc_res: COUNT, totalLimit 2^53-1, never resets, leak threshold ${leak_threshold}s"
	put_policy "$qc_res"
	if [[ " $wrk_scenarios " == *" pools "* ]]; then
		# Issue 13 §8: the same policy with 12 business lines (3 CORE, 4 GROWTH,
		# 5 EXPLORE; weights 100·0.85^k, as qc-replay pools), pools at their
		# defaults.
		say "policy $qc_pool_res: as $qc_res, with 12 business lines"
		put_policy "$qc_pool_res"
		local k tier weight
		for k in $(seq 1 12); do
			tier=EXPLORE
			((k <= 7)) && tier=GROWTH
			((k <= 3)) && tier=CORE
			weight=$(awk -v k="$k" 'BEGIN {printf "%d", 100 * 0.85 ^ (k - 1)}')
			curl -fsS -o /dev/null -H "Authorization: Bearer $admin_token" -X PUT -H 'Content-Type: application/json' \
				-d "{\"tier\":\"$tier\",\"weight\":$weight}" "$qc_url/admin/policies/$qc_pool_res/lines/line-$k" ||
				die "PUT /admin/policies/$qc_pool_res/lines/line-$k failed"
		done
	fi
	watch=(--watch "quota-center=$qc_pid" --watch "baseline=$base_pid")
	[[ -n ${redis_pid:-} && -r /proc/$redis_pid/stat ]] && watch+=(--watch "redis-server=$redis_pid")
	[[ -n ${mariadb_pid:-} && -r /proc/$mariadb_pid/stat ]] && watch+=(--watch "mariadbd=$mariadb_pid")
	return 0
}

# empty_redis: the benchmark's Redis without what earlier scenarios left
# (fresh_mode flush: FLUSHDB; keys: UNLINK of this run's keys only).
empty_redis() {
	if [[ $fresh_mode == flush ]]; then
		rcli flushdb >/dev/null || die "FLUSHDB on $redis failed"
		return 0
	fi
	local p
	for p in "qc:{$qc_res}:*" "qc:{$qc_pool_res}:*" "qc:{$base_res}:*" "qc:{$floor_res}:*" "qcbench_resource_r${run_id}_*"; do
		rcli --scan --count 1000 --pattern "$p" 2>/dev/null | xargs -r -n 500 echo UNLINK | rcli >/dev/null 2>&1 || true
	done
}

# fresh_backends [peer]: every server stopped, Redis emptied (empty_redis),
# the ledgers dropped and made again, every server started again (issue 23
# §3: a scenario does not inherit the millions of open sessions and rows of
# the one before it). QC_BENCH_FRESH=0 keeps the servers and their state.
fresh_backends() {
	[[ $fresh_mode == 0 ]] && return 0
	say "fresh backends: stopping the servers, emptying Redis ($fresh_mode) and the ledgers"
	stop "$qc_pid" quota-center
	stop "$base_pid" qc-baseline
	stop "$peer_pid" ratelimit
	qc_pid="" base_pid="" peer_pid=""
	floor_halt
	empty_redis
	start_servers "$@"
}

redis_pid=$(rcli info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
mariadb_pid=$(cat "$(sql -e 'SELECT @@pid_file')" 2>/dev/null || pgrep -o -x mariadbd || pgrep -o -x mysqld || true)
[[ $fresh_mode == 0 ]] || empty_redis
start_servers peer


# Goroutines: a pprof endpoint on an admin address if quota-center has one,
# else go_goroutines on /metrics (the same runtime.NumGoroutine figure).
pprof_flag=$(bin/quota-center serve -h 2>&1 | grep -Eo -- '-(pprof[a-z-]*|admin-(http-)?addr)' | head -1 || true)
if [[ -n $pprof_flag ]]; then
	goroutines_note="quota-center has a $pprof_flag flag (\`serve -h\`); this script still reads go_goroutines from /metrics (the same runtime.NumGoroutine figure the goroutine profile counts), in the middle of each measured window."
else
	goroutines_note="quota-center has no pprof or admin-address flag (\`serve -h\` lists none), so /debug/pprof/goroutine is not available: the count is go_goroutines from /metrics (the same runtime.NumGoroutine figure), read in the middle of each measured window."
fi

# meta KEY VALUE: one line of the report's header.
meta() { printf '%s=%s\n' "$1" "$2" >>"$meta"; }
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta host "$(uname -n), load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
meta cpu "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
meta nproc "$(nproc)"
meta memory "$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
meta kernel "$(uname -r)"
meta go "$(go version | cut -d' ' -f3-)"
meta redis "$(redis-server --version | grep -o 'v=[^ ]*' | cut -d= -f2) (at $redis; appendonly $(rcli config get appendonly | tail -1), save '$(rcli config get save | tail -1)')"
meta mariadb "$(sql -e 'SELECT CONCAT(VERSION(), " (innodb_flush_log_at_trx_commit=", @@innodb_flush_log_at_trx_commit, ", sync_binlog=", @@sync_binlog, ", log_bin=", @@log_bin, ", innodb_buffer_pool_size=", ROUND(@@innodb_buffer_pool_size/1048576), " MiB)")')"
meta commit "$version"
meta how "Both servers run on 127.0.0.1 on the machine's Redis ($redis); quota-center also on MariaDB ($mysql_hostport, database $db, created fresh), with \`--log-level warn${serve_args[*]:+ ${serve_args[*]}}\` and every other setting at its default (auto-pipelining of the Redis scripts and group commit of the ledger included)."
meta how "qc-baseline (cmd/qc-baseline) is the Redis-speed reference: net/http, the same apply/heartbeat/finish Lua scripts through redisstore.Store once per request, one never-resetting period seeded at start; no router, policy lookup, ledger, metrics or logging."
meta how "quota-center's resource has a COUNT policy with totalLimit 2^53-1 and no reset, so no apply is refused (a 429 would show in the non-2xx column); each apply asks for 1 and each finish reports 1. Its leak threshold is ${leak_threshold} s (qc-baseline's lease too), so that the never-finished sessions of the apply-only scenario are not swept in the middle of later scenarios."
meta how "Each cell: $reps repetitions per server, interleaved baseline, quota-center, baseline, …; each run is a $warmup warm-up then $duration measured, connections ∈ {$conns_list}."
case $fresh_mode in
flush) meta wrkhow "Fresh backends per scenario (issue 23 §3): before each wrk scenario after the first, and before the qc-bench runs, every server is stopped, Redis's database is flushed (FLUSHDB on $redis), the ledgers ($db, ${floor_db}) are dropped and made again and the servers start again, so that no scenario inherits the open sessions and ledger rows of the one before it (QC_BENCH_FRESH=flush)." ;;
keys) meta wrkhow "Fresh backends per scenario (issue 23 §3): before each wrk scenario after the first, and before the qc-bench runs, every server is stopped, this run's Redis keys are deleted (the shared Redis $redis is not flushed), the ledgers ($db, ${floor_db}) are dropped and made again and the servers start again (QC_BENCH_FRESH=keys)." ;;
*) meta wrkhow "The servers run through every scenario without a restart (QC_BENCH_FRESH=0): later scenarios inherit the open sessions and ledger rows of the earlier ones." ;;
esac
meta goroutines "$goroutines_note"
if [[ $redis == 127.0.0.1:6379 && $mysql_hostport == 127.0.0.1:3306 ]]; then
	meta note "redis-server and mariadbd are the machine's shared servers: their CPU includes anything else using them during a run (other test suites, quota-center's background work such as group commits still in flight or the sweeper), which is why mariadbd can show CPU during baseline runs."
else
	meta note "redis-server ($redis) and mariadbd ($mysql_hostport) are servers of this benchmark alone: their CPU is the servers' under test, plus quota-center's background work (group commits still in flight, the sweeper)."
fi
meta gobench "internal/app/bench_test.go, \`go test -run '^\$' -bench . -benchtime $gobench ./internal/app/\`, run after the servers above were stopped: the full HTTP stack of app.Serve over loopback, one request at a time, on dev mode (miniredis + SQLite) and on the real Redis and MariaDB; B/op and allocs/op are the whole process's (client and server) per operation."
meta command "make bench    # = bash scripts/bench.sh; QC_BENCH_REPS=$reps QC_BENCH_CONNECTIONS=\"$conns_list\" QC_BENCH_WRK_SCENARIOS=\"$wrk_scenarios\" QC_BENCH_WRK_DURATION=$wrk_duration QC_BENCH_WRK_WARMUP=$wrk_warmup QC_BENCH_WRK_SETTLE=$wrk_settle QC_BENCH_SCENARIOS=\"$scenarios\" QC_BENCH_DURATION=$duration QC_BENCH_WARMUP=$warmup${peer_bin:+ QC_BENCH_PEER_RATELIMIT=$peer_bin}"
meta command "QC_ADMIN_TOKENS=bench:<random> bin/quota-center ${qc_flags[*]}"
meta command "bin/qc-baseline --addr 127.0.0.1:$base_port --redis-addr $redis --resource $base_res --lease ${leak_threshold}s"
floor_meta
if [[ -n $scenarios ]]; then
	meta command "bin/qc-bench --url $qc_url --resource $qc_res --label quota-center --scenario SCENARIO --connections N --duration $duration --warmup $warmup --rep R --metrics-url $qc_url/metrics ${watch[*]}"
	meta command "bin/qc-bench --url $base_url --resource $base_res --label baseline ... (same)"
fi
if [[ -n $wrk_scenarios ]]; then
	meta command "wrk -t $wrk_threads -c N -d $wrk_duration --latency -s scripts/wrk/SCENARIO.lua $qc_url -- $qc_res   # heartbeat: -- RESOURCE hb-<run> 1000; ratelimit.lua on the peer's port"
fi
load1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN {exit !(l > n / 2)}'; then
	meta note "The load average was $load1 when the run started: other work was using the machine (the \"other\" CPU column of the qc-bench tables and the \"machine\" column of the wrk tables show how much during each run). Figures taken while other processes held CPU understate every server."
	say "warning: load average $load1 — other work on the machine will lower the figures"
fi

read -r -a conn_arr <<<"$conns_list"

# ---- Headline runs: wrk (issue 11) ----
clk_tck=$(getconf CLK_TCK)
# cpu_ticks PID: utime+stime of a process, in clock ticks (0 if gone).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# busy_ticks: busy ticks of the whole machine (all cores) so far.
busy_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6}' /proc/stat; }
# wrk_run SCENARIO CONNS SERVER REP URL ARGS...: one warm-up, then one
# measured wrk run; appends a JSON line with wrk's QCWRK figures and the CPU
# seconds of the server, redis-server, mariadbd and wrk itself.
wrk_run() {
	local scen=$1 c=$2 server=$3 rep=$4 url=$5 script pid line qcwrk
	shift 5
	script=scripts/wrk/$scen.lua
	[[ $server == "$LABEL_PEER" ]] && script=scripts/wrk/ratelimit.lua
	case $server in
	quota-center | quota-center-plain) pid=$qc_pid ;;
	baseline) pid=$base_pid ;;
	"$LABEL_FLOOR") pid=$floor_pid ;;
	*) pid=$peer_pid ;;
	esac
	kill -0 "$pid" 2>/dev/null || die "$server exited; see $work/$server.log"
	wrk -t "$wrk_threads" -c "$c" -d "$wrk_warmup" -s "$script" "$url" -- "$@" >/dev/null 2>&1 || die "wrk warm-up ($server $scen) failed"
	sleep "$wrk_settle"
	local s0 r0 m0 b0 s1 r1 m1 b1 w
	s0=$(cpu_ticks "$pid") r0=$(cpu_ticks "${redis_pid:-0}") m0=$(cpu_ticks "${mariadb_pid:-0}") b0=$(busy_ticks)
	# The subshell's `times` gives the CPU of its only child, wrk.
	line=$( (wrk -t "$wrk_threads" -c "$c" -d "$wrk_duration" --latency -s "$script" "$url" -- "$@"; times) 2>&1) ||
		die "wrk ($server $scen $c connections) failed: $line"
	s1=$(cpu_ticks "$pid") r1=$(cpu_ticks "${redis_pid:-0}") m1=$(cpu_ticks "${mariadb_pid:-0}") b1=$(busy_ticks)
	qcwrk=$(grep -m1 '^QCWRK ' <<<"$line" | cut -d' ' -f2-)
	[[ -n $qcwrk ]] || die "wrk printed no QCWRK line: $line"
	# Last line of `times`: the children's user and system time, e.g. 0m1.230s 0m0.450s.
	w=$(tail -1 <<<"$line" | awk '{n = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); n += a[1] * 60 + a[2]} print n}')
	printf '{"scenario":"%s","connections":%d,"server":"%s","rep":%d,"wrk":%s,"cpu_s":{"%s":%s,"redis-server":%s,"mariadbd":%s,"wrk":%s},"machine_busy_s":%s}\n' \
		"$scen" "$c" "$server" "$rep" "$qcwrk" "$server" \
		"$(awk -v a="$s0" -v b="$s1" -v t="$clk_tck" 'BEGIN {print (b - a) / t}')" \
		"$(awk -v a="$r0" -v b="$r1" -v t="$clk_tck" 'BEGIN {print (b - a) / t}')" \
		"$(awk -v a="$m0" -v b="$m1" -v t="$clk_tck" 'BEGIN {print (b - a) / t}')" "$w" \
		"$(awk -v a="$b0" -v b="$b1" -v t="$clk_tck" 'BEGIN {print (b - a) / t}')" >>"$wrk_results"
	printf '%s %s %d conns rep %d: %s\n' "$server" "$scen" "$c" "$rep" "$qcwrk" >&2
}
LABEL_PEER=envoy-ratelimit
read -r -a wrk_arr <<<"$wrk_scenarios"
hb_n=1000 hb_prefix=hb-$run_id
scen_i=0
for scen in "${wrk_arr[@]}"; do
	[[ -f scripts/wrk/$scen.lua ]] || die "no wrk script scripts/wrk/$scen.lua"
	if ((scen_i++ > 0)); then
		if [[ $scen == apply ]]; then fresh_backends peer; else fresh_backends; fi
	fi
	if [[ $scen == heartbeat ]]; then
		say "wrk: opening $hb_n sessions $hb_prefix-1…$hb_n on each server"
		for u in "$qc_url|$qc_res" "$base_url|$base_res"; do
			wrk -t 1 -c 8 -d 3s -s scripts/wrk/heartbeat.lua "${u%%|*}" -- "${u##*|}" "$hb_prefix" "$hb_n" open >/dev/null 2>&1 ||
				die "wrk could not open the heartbeat sessions on ${u%%|*}"
		done
	fi
	for c in "${conn_arr[@]}"; do
		for ((rep = 1; rep <= reps; rep++)); do
			if ((rep > 1)) && [[ $fresh_reps == *" $scen "* ]]; then
				if [[ $scen == apply ]]; then fresh_backends peer; else fresh_backends; fi
			fi
			targets=(baseline "$LABEL_FLOOR" "$LABEL_PEER" quota-center)
			[[ $scen == pools ]] && targets=(quota-center-plain quota-center) # issue 13 §8: the same server, with and without lines
			# The order turns by one each rep: a scenario's open sessions and
			# ledger rows grow through its reps, and a fixed order measured
			# each server always just after the same other one, on more of
			# them.
			k=$(((rep - 1) % ${#targets[@]}))
			targets=("${targets[@]:k}" "${targets[@]:0:k}")
			for target in "${targets[@]}"; do
				case $target in
				baseline) url=$base_url res=$base_res ;;
				quota-center-plain) url=$qc_url res=$qc_res ;;
				quota-center) url=$qc_url res=$qc_res ;;
				"$LABEL_FLOOR")
					floor_wanted "$scen" || continue
					url=$floor_url res=$floor_res
					;;
				*)
					[[ -n $peer_bin && $scen == apply ]] || continue
					url=http://127.0.0.1:$peer_port res=r$run_id
					;;
				esac
				wait_quiet
				if [[ $scen == heartbeat ]]; then
					wrk_run "$scen" "$c" "$target" "$rep" "$url" "$res" "$hb_prefix" "$hb_n"
				elif [[ $scen == pools && $target == quota-center ]]; then
					wrk_run "$scen" "$c" "$target" "$rep" "$url" "$qc_pool_res" 12
				elif [[ $scen == pools ]]; then
					wrk_run "$scen" "$c" "$target" "$rep" "$url" "$res" 0
				else
					wrk_run "$scen" "$c" "$target" "$rep" "$url" "$res"
				fi
			done
		done
	done
done
stop "$peer_pid" ratelimit
peer_pid=""
[[ -n $floor_pid ]] && floor_ran=1
floor_stop

# The gateway (issue 23 §3): ShouldRateLimit of quota-center's gateway
# against envoyproxy/ratelimit's own gRPC endpoint, in this run, on fresh
# backends (scripts/bench-gateway.sh starts both servers itself).
gateway_md=""
ghz_bin=${GHZ:-$(command -v ghz || echo "$(go env GOPATH)/bin/ghz")}
if [[ -n $peer_bin && $gateway_on != 0 ]]; then
	if [[ -x $ghz_bin ]] && command -v jq >/dev/null; then
		say "gateway: stopping the servers, emptying Redis, scripts/bench-gateway.sh"
		stop "$qc_pid" quota-center
		stop "$base_pid" qc-baseline
		qc_pid="" base_pid=""
		[[ $fresh_mode == 0 ]] || empty_redis
		if QC_BENCH_GW_BUILD=0 GHZ=$ghz_bin QC_BENCH_PEER_RATELIMIT=$peer_bin QC_BENCH_REDIS=$redis \
			QC_BENCH_MYSQL_HOST=$mysql_hostport QC_BENCH_GW_REPS=$reps bash scripts/bench-gateway.sh >"$work/gateway.md" 2>"$work/gateway.log"; then
			gateway_md=$work/gateway.md
		else
			meta note "scripts/bench-gateway.sh failed: $(tail -3 "$work/gateway.log" | tr '\n' ' ')"
		fi
	else
		meta note "The gateway was not measured: ghz or jq is missing (go install github.com/bojand/ghz/cmd/ghz@latest)."
	fi
fi
if [[ -n $wrk_scenarios ]]; then
	meta wrkhow "Load generator: wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}') (Debian's package), \`-t $wrk_threads -c N -d $wrk_duration --latency\` after a $wrk_warmup warm-up on fresh connections and a $wrk_settle pause, with the Lua scripts of scripts/wrk/ (apply.lua, session.lua, heartbeat.lua, pools.lua, ratelimit.lua); each connection has one request in flight and sends the next as soon as the answer is read. $reps repetitions per server and cell, interleaved baseline$([[ -n $floor_ran ]] && echo ", baseline+ledger")$([[ -n $peer_bin ]] && echo ", envoyproxy/ratelimit"), quota-center, the order turned by one each rep (rep 2 starts with the second server; a scenario's state grows through its reps$([[ $fresh_mode != 0 && -n ${fresh_reps// /} ]] && echo ", except in${fresh_reps% }, whose every rep starts on fresh backends"); connections ∈ {$conns_list}."
	meta wrkhow "apply: POST /quota/apply of 1 on the benchmark resource, every request a new session (server-made id). session: each connection sends an apply, or, when an apply's 200 answer is waiting for its finish, that finish (actualUsedAmount 1): a finish leaves only after its apply was answered; sessions/s counts finishes answered 200. heartbeat: POST /quota/heartbeat round-robin over $hb_n sessions opened before the first run. pools (issue 13 §8): the apply of 1 on a resource with 12 business lines (3 CORE, 4 GROWTH, 5 EXPLORE, pools at their defaults), round robin over the lines, interleaved with the same script's apply on the plain resource (quota-center-plain)."
	meta wrkhow "Servers: quota-center (durable ledger row per apply, group commit and Redis auto-pipelining at their defaults), qc-baseline (cmd/qc-baseline: net/http and one EVALSHA of the same apply/heartbeat/finish scripts per request, no ledger)$([[ -n $floor_ran ]] && echo ", baseline+ledger (qc-baseline --mysql-dsn: the same EVALSHA, auto-pipelined as quota-center's, then the session's ledger row, and for a finish its settling update, through quota-center's own group commit, answered once committed: the floor of a durable row; apply and session scenarios only)")$([[ -n $peer_bin ]] && echo ", and envoyproxy/ratelimit ($(cd "$(dirname "$peer_bin")" 2>/dev/null && git describe --always 2>/dev/null || echo "built from source"); its HTTP /json endpoint, one descriptor per request, INCRBY + EXPIRE per request and no ledger; REDIS_POOL_SIZE, pipelining and local cache at its defaults) on the same Redis, apply scenario only")."
	meta wrkhow "CPU per answer: utime+stime from /proc/<pid>/stat of the server under test, redis-server and mariadbd over the measured run, and wrk's own (bash \`times\` of its subshell), divided by the 2xx answers; \"machine\" divides the busy CPU of the whole machine (/proc/stat minus idle and iowait) the same way, and so includes any other work. CPU per answer moves much less than req/s when the machine is shared; p99 is wrk's (every request of the run)."
fi

read -r -a scen_arr <<<"$scenarios"
if [[ -z $qc_pid ]]; then
	# Stopped for the gateway: started again when a later run needs them.
	if [[ -n $scenarios || -n $two_scenarios || $soak != 0 ]]; then
		[[ $fresh_mode == 0 ]] || empty_redis
		start_servers
	fi
elif ((${#wrk_arr[@]} > 0 && ${#scen_arr[@]} > 0)); then
	fresh_backends
fi
total=$((${#scen_arr[@]} * ${#conn_arr[@]} * reps * 2))
n=0
for scen in "${scen_arr[@]}"; do
	for c in "${conn_arr[@]}"; do
		for ((rep = 1; rep <= reps; rep++)); do
			for target in baseline quota-center; do
				n=$((n + 1))
				if [[ $target == baseline ]]; then
					args=(--url "$base_url" --resource "$base_res")
				else
					args=(--url "$qc_url" --resource "$qc_res" --metrics-url "$qc_url/metrics")
				fi
				wait_quiet
				printf '[%d/%d] ' "$n" "$total" >&2
				kill -0 "$qc_pid" 2>/dev/null || die "quota-center exited; see $work/quota-center.log"
				kill -0 "$base_pid" 2>/dev/null || die "qc-baseline exited; see $work/qc-baseline.log"
				bin/qc-bench "${args[@]}" --label "$target" --scenario "$scen" --connections "$c" \
					--duration "$duration" --warmup "$warmup" --rep "$rep" "${watch[@]}" >>"$results"
			done
		done
	done
done

if ((noisy_starts > 0)); then
	meta note "$noisy_starts of $((total + $(wc -l <"$wrk_results"))) runs started while other work still kept more than 0.3 core busy after waiting ${quiet_wait}s for it to stop (see the \"other\" and \"machine\" columns)."
fi

# Two instances: a second quota-center on the same Redis and database; both
# driven at once, half the connections each.
two_args=()
if [[ -n $two_scenarios ]]; then
	say "starting a second quota-center on 127.0.0.1:$qc2_port (same Redis and database)"
	qc2_flags=("${qc_flags[@]}")
	qc2_flags[2]="127.0.0.1:$qc2_port" # --http-addr's value
	QC_ADMIN_TOKENS="bench:$admin_token" bin/quota-center "${qc2_flags[@]}" >"$work/quota-center-2.log" 2>&1 &
	qc2_pid=$!
	wait_ready "http://127.0.0.1:$qc2_port/readyz" || { tail -20 "$work/quota-center-2.log" >&2; die "the second quota-center did not get ready"; }
	: >"$two_results"
	read -r -a two_arr <<<"$two_scenarios"
	for scen in "${two_arr[@]}"; do
		for c in "${conn_arr[@]}"; do
			for ((rep = 1; rep <= reps; rep++)); do
				wait_quiet
				say "two instances: $scen, $c connections in all, rep $rep"
				half=$((c / 2))
				bin/qc-bench --url "$qc_url" --resource "$qc_res" --label instance-a --scenario "$scen" --connections "$half" \
					--duration "$duration" --warmup "$warmup" --rep "$rep" --watch "instance-a=$qc_pid" --watch "instance-b=$qc2_pid" >>"$two_results" &
				a=$!
				bin/qc-bench --url "http://127.0.0.1:$qc2_port" --resource "$qc_res" --label instance-b --scenario "$scen" --connections "$half" \
					--duration "$duration" --warmup "$warmup" --rep "$rep" --watch "instance-a=$qc_pid" --watch "instance-b=$qc2_pid" >>"$two_results" &
				b=$!
				wait "$a" || die "qc-bench (instance A) failed"
				wait "$b" || die "qc-bench (instance B) failed"
			done
		done
	done
	stop "$qc2_pid" "the second quota-center"
	qc2_pid=""
	two_args=(--two "$two_results")
	meta command "two instances: QC_ADMIN_TOKENS=bench:<random> bin/quota-center ${qc2_flags[*]}; then for each scenario, connection count and rep, at the same time: bin/qc-bench --url $qc_url --label instance-a --connections N/2 ... and bin/qc-bench --url http://127.0.0.1:$qc2_port --label instance-b --connections N/2 ..."
fi

soak_args=()
if [[ $soak != 0 ]]; then
	wait_quiet
	say "long run: quota-center, session scenario, 200 connections, $soak, sampling every 5 s"
	bin/qc-bench --url "$qc_url" --resource "$qc_res" --label quota-center --scenario session \
		--connections 200 --duration "$soak" --warmup 0 --sample-every 5s \
		--metrics-url "$qc_url/metrics" "${watch[@]}" >"$soak_results"
	soak_args=(--soak "$soak_results")
	meta command "bin/qc-bench --url $qc_url --resource $qc_res --label quota-center --scenario session --connections 200 --duration $soak --warmup 0 --sample-every 5s --metrics-url $qc_url/metrics ${watch[*]}"
fi

stop "$qc_pid" quota-center
stop "$base_pid" qc-baseline
qc_pid="" base_pid=""
if grep -q '"level":"error"' "$work/quota-center.log"; then
	meta note "quota-center logged $(grep -c '"level":"error"' "$work/quota-center.log") error line(s) during the run; the first: $(grep -m1 '"level":"error"' "$work/quota-center.log" | cut -c1-300)"
fi

gobench_args=()
if [[ $gobench != 0 ]]; then
	say "go test -bench (in-process handler benchmarks, -benchtime $gobench)"
	if go test -run '^$' -bench . -benchtime "$gobench" ./internal/app/ >"$work/gobench.raw" 2>&1; then
		grep -E '^(goos|goarch|pkg|cpu|Benchmark)' "$work/gobench.raw" >"$gobench_out" || true
	else
		{ echo "go test -bench failed:"; tail -20 "$work/gobench.raw"; } >"$gobench_out"
	fi
	gobench_args=(--gobench "$gobench_out")
fi

# Handler benchmarks (internal/httpapi/bench_test.go): this tree, and, with
# QC_BENCH_BEFORE, the same file on that revision; benchstat compares them.
handlers_args=()
if [[ $gobench != 0 ]]; then
	say "go test -bench Handler -benchmem (this tree${before:+ and $before})"
	hb=(go test -run '^$' -bench '^BenchmarkHandler' -benchmem -count 6 -benchtime 20000x ./internal/httpapi/)
	"${hb[@]}" >"$work/handlers.after" 2>&1 || die "handler benchmarks failed: $(tail -5 "$work/handlers.after")"
	inputs=("after=$work/handlers.after")
	if [[ -n $before ]]; then
		wt=$work/before-tree
		git worktree add --detach -f "$wt" "$before" >/dev/null 2>&1 || die "git worktree add $before failed"
		cp internal/httpapi/bench_test.go "$wt/internal/httpapi/"
		if (cd "$wt" && "${hb[@]}") >"$work/handlers.before" 2>&1; then
			inputs=("before=$work/handlers.before" "${inputs[@]}")
		else
			meta note "The handler benchmarks did not build or run on $before: $(tail -3 "$work/handlers.before" | tr '\n' ' ')"
		fi
		git worktree remove --force "$wt" >/dev/null 2>&1 || true
		meta handlers "internal/httpapi/bench_test.go (router, middleware, decoding, quota.Service and metrics through Handler().ServeHTTP, with in-memory backends that answer at once), the same file run on $before (before) and on this tree (after): \`${hb[*]}\`, compared by benchstat (\`go tool benchstat\`, pinned in go.mod). B/op and allocs/op are exact; sec/op is the median of 6 runs on a machine that also ran the load tests above, so read its change with the ± column."
	else
		meta handlers "internal/httpapi/bench_test.go (router, middleware, decoding, quota.Service and metrics through Handler().ServeHTTP, with in-memory backends that answer at once): \`${hb[*]}\`, summarised by benchstat. Set QC_BENCH_BEFORE=<revision> for a before/after comparison."
	fi
	go tool benchstat "${inputs[@]}" >"$work/handlers.txt" 2>&1 || true
	handlers_args=(--handlers "$work/handlers.txt")
fi

notes_args=()
[[ -f $notes ]] && notes_args=(--notes "$notes")

mkdir -p "$(dirname "$out")"
bin/qc-bench report --results "$results" --wrk "$wrk_results" "${soak_args[@]}" --meta "$meta" "${gobench_args[@]}" "${handlers_args[@]}" "${two_args[@]}" "${notes_args[@]}" --out "$out"
if [[ -n $gateway_md ]]; then
	say "gateway section appended to $out"
	{
		echo
		echo "## Gateway: ShouldRateLimit against envoyproxy/ratelimit's gRPC (issue 23 §3, this run)"
		echo
		echo "scripts/bench-gateway.sh, run by make bench after the wrk scenarios on a freshly emptied Redis and a fresh ledger database: ghz against each server's gRPC endpoint, interleaved, one descriptor per request; quota-center writes one FINISHED ledger row per charged request, envoyproxy/ratelimit none."
		echo
		cat "$gateway_md"
		awk -F'|' '$3 !~ /^ *[0-9]+ *$/ {next} $2 ~ /ratelimit/ {p[++np] = $3 + 0} $2 ~ /quota-center/ {q[++nq] = $3 + 0}
			function med(a, n,   i, j, t) {for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) {t = a[i]; a[i] = a[j]; a[j] = t} return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2}
			END {if (np && nq) {r = med(q, nq) / med(p, np); printf "\nMedian req/s: quota-center %d, envoyproxy/ratelimit %d: %.2f× (target ≥ 0.9×: %s).\n", med(q, nq), med(p, np), r, (r >= 0.9 ? "pass" : "**FAIL**")}}' "$gateway_md"
	} >>"$out"
fi
if [[ ${QC_BENCH_SDK:-1} != 0 ]]; then
	say "Go SDK benchmarks (scripts/bench-sdk.sh), appended to $out"
	bash scripts/bench-sdk.sh >>"$out" || say "scripts/bench-sdk.sh failed; its section is missing from $out"
fi
if [[ ${QC_BENCH_MANY_POLICIES:-100000} != 0 ]]; then
	say "many-policies scenario (scripts/bench-many-policies.sh, issue 23 §1), appended to $out"
	QC_BENCH_MANY_BUILD=0 QC_BENCH_REDIS=$redis QC_BENCH_MYSQL_HOST=$mysql_hostport bash scripts/bench-many-policies.sh >>"$out" ||
		say "scripts/bench-many-policies.sh failed; its section is missing from $out"
fi
say "wrote $out (raw results in $work)"
