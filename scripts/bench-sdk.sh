#!/usr/bin/env bash
# scripts/bench-sdk.sh — the Go SDK's benchmarks (issue 12), run by
# scripts/bench.sh (`make bench`) after the server benchmarks, or alone.
# Prints a Markdown section on stdout (bench.sh appends it to
# docs/performance.md); progress goes to stderr.
#
#  1. `go test -bench LocalPool` in the api module: LocalPool.Take from 8
#     goroutines against an in-memory center (takes/s, central calls per
#     1,000 tokens).
#  2. qc-replay on the Azure code trace (8,819 rows), plain (one apply and one
#     finish per row) and with --local-batch (rows served from a LocalPool),
#     interleaved, QC_BENCH_SDK_REPS times each, against one quota-center on
#     the real Redis and MariaDB (a fresh database qc_bench_sdk, dropped at
#     the end); each run must end with qc-replay's exact usedAmount check OK.
#
# Environment:
#   QC_BENCH_SDK_REPS      repetitions of each replay mode        (default 2)
#   QC_BENCH_SDK_PORT      quota-center's port on 127.0.0.1        (default 18095)
#   QC_BENCH_SDK_BATCH     --local-batch (first batch, tokens)     (default 20000)
#   QC_BENCH_REDIS, QC_BENCH_MYSQL_HOST as in bench.sh
#   QC_BENCH_TRACE         trace CSV (default ../shared/data/azure-llm-trace-2023/AzureLLMInferenceTrace_code.csv)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

reps=${QC_BENCH_SDK_REPS:-2}
port=${QC_BENCH_SDK_PORT:-18095}
batch=${QC_BENCH_SDK_BATCH:-20000}
redis=${QC_BENCH_REDIS:-127.0.0.1:6379}
mysql_hostport=${QC_BENCH_MYSQL_HOST:-127.0.0.1:3306}
trace=${QC_BENCH_TRACE:-../shared/data/azure-llm-trace-2023/AzureLLMInferenceTrace_code.csv}
mysql_host=${mysql_hostport%:*} mysql_port=${mysql_hostport##*:}
db=qc_bench_sdk
url=http://127.0.0.1:$port
limit=12000000 # below the trace's demand: the end of each run is refused with 429

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench-sdk: %s\n' "$*" >&2; exit 1; }
sql() { mariadb --protocol=tcp -h "$mysql_host" -P "$mysql_port" -uroot --connect-timeout=3 -N -B "$@"; }
[[ -r $trace ]] || die "trace $trace not found"

work=$(mktemp -d)
qc_pid=""
cleanup() {
	[[ -n $qc_pid ]] && kill "$qc_pid" 2>/dev/null && wait "$qc_pid" 2>/dev/null || true
	sql -e "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

say "go test -bench LocalPool (api module)"
(cd api && go test -run '^$' -bench 'LocalPool' -benchtime 3s -count 3 ./client/) >"$work/gobench" 2>&1 ||
	die "LocalPool benchmark failed: $(tail -5 "$work/gobench")"

say "go build bin/quota-center bin/qc-replay"
mkdir -p bin
go build -trimpath -o bin/quota-center ./cmd/quota-center
go build -trimpath -o bin/qc-replay ./cmd/qc-replay
sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
QC_ADMIN_TOKENS="bench:$token" bin/quota-center serve --http-addr "127.0.0.1:$port" --redis-addr "$redis" \
	--mysql-dsn "root@tcp($mysql_host:$mysql_port)/$db" --migrate-on-start --log-level warn >"$work/qc.log" 2>&1 &
qc_pid=$!
for _ in $(seq 100); do curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && break; sleep 0.2; done
curl -fsS -o /dev/null "$url/readyz" || die "quota-center did not get ready: $(tail -5 "$work/qc.log")"

run_id=$(date +%s)
for rep in $(seq "$reps"); do
	for mode in plain local; do
		args=(--url "$url" --trace "$trace" --resource "sdk-$mode-$run_id-$rep" --limit "$limit" --concurrency 16 --admin-token "$token")
		[[ $mode == local ]] && args+=(--local-batch "$batch")
		say "qc-replay $mode, rep $rep"
		bin/qc-replay "${args[@]}" >"$work/$mode.$rep" 2>&1 || die "qc-replay $mode failed: $(tail -5 "$work/$mode.$rep")"
	done
done

# field FILE LABEL: the text after "LABEL:" on its line.
field() { sed -n "s/^$2: *//p" "$1" | head -1; }
echo
echo "## Go SDK: LocalPool and qc-replay --local-batch (scripts/bench-sdk.sh)"
echo
echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine makes these figures noisy)."
echo
echo "**LocalPool.Take** (\`api/client/pool_bench_test.go\`: Take(1) from 8 goroutines, batches from an in-memory center; target ≥ 1,000,000 takes/s):"
echo
echo '```'
grep -E '^Benchmark' "$work/gobench"
echo '```'
echo
echo "**qc-replay on the Azure code trace** (8,819 rows, limit $limit tokens so the end is refused with 429, concurrency 16, real Redis and MariaDB, one quota-center; plain = one apply and one finish per row, local = \`--local-batch $batch\`: rows reserve and commit in a LocalPool, central calls only for batches). Latencies are per row: apply and finish in plain mode, Reserve and Commit in local mode."
echo
echo "| mode | rep | wall s | rows/s | central calls | calls/s | calls per 1,000 tokens | apply/reserve p50 / p99 ms | finish/commit p50 / p99 ms | granted | refused | usedAmount check |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for rep in $(seq "$reps"); do
	for mode in plain local; do
		f=$work/$mode.$rep
		wall=$(field "$f" "wall time" | cut -d' ' -f1)
		rows=$(field "$f" rows)
		calls=$(field "$f" requests | cut -d' ' -f1)
		charged=$(field "$f" "tokens charged")
		ap=$(field "$f" "apply latency" | sed -E 's/p50 ([0-9.]+) ms, p99 ([0-9.]+) ms.*/\1 \/ \2/')
		fi=$(field "$f" "finish latency" | sed -E 's/p50 ([0-9.]+) ms, p99 ([0-9.]+) ms.*/\1 \/ \2/')
		check=$(sed -n 's/^check: //p' "$f")
		awk -v m="$mode" -v r="$rep" -v w="$wall" -v rows="$rows" -v c="$calls" -v ch="$charged" -v ap="$ap" -v fi="$fi" \
			-v g="$(field "$f" granted)" -v rf="$(field "$f" "refused (429)")" -v ck="$check" \
			'BEGIN { printf "| %s | %s | %.2f | %.0f | %d | %.0f | %.3f | %s | %s | %s | %s | %s |\n", m, r, w, rows/w, c, c/w, c*1000/ch, ap, fi, g, rf, ck }'
	done
done
