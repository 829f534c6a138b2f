#!/usr/bin/env bash
# scripts/cpu-per-apply.sh — CPU per answer of quota-center, redis-server and
# mariadbd under one short wrk run (docs/performance-notes.md, "CPU per
# apply"). On a machine shared with other work, req/s moves by a factor of
# two between runs; CPU per answer moves much less, so compare builds with
# interleaved runs of this script (A, B, A, B, …), not with one run each.
#
#   scripts/cpu-per-apply.sh BIN [SCENARIO] [CONNECTIONS] [DURATION]
#     BIN          a quota-center binary (go build -o /tmp/qc ./cmd/quota-center)
#     SCENARIO     a script of scripts/wrk: apply (default), session, heartbeat
#     CONNECTIONS  wrk -c (default 50); DURATION wrk -d (default 5s)
#
# Environment: QC_PERF_REDIS (host:port, default 127.0.0.1:16479) and
# QC_PERF_MYSQL (host:port, default 127.0.0.1:13306, user root): servers of
# this run alone, on this machine (their pids are read from INFO and
# @@pid_file), since their CPU is counted whole; the database qc_perf_cpu is
# dropped and made again, and the Redis database is flushed. QC_PERF_PORT
# (default 18480) is quota-center's. QC_PERF_PPROF=FILE also writes a CPU
# profile of quota-center over the measured run. QC_PERF_SETTLE (seconds,
# default 6; 0 = the measurements before 2 December 2026 02:40 UTC) is the
# pause between the warm-up and the measured run.
#
# Prints one line of figures: 2xx answers/s, p50/p99, and µs of CPU
# (utime+stime from /proc/<pid>/stat) per 2xx answer of each process and of
# wrk; Redis calls per answer from INFO commandstats; read+write system
# calls and context switches per answer; rows per group-commit INSERT and
# calls per Redis pipeline.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=$1 scen=${2:-apply} conns=${3:-50} dur=${4:-5s}
redis=${QC_PERF_REDIS:-127.0.0.1:16479} mysqlhp=${QC_PERF_MYSQL:-127.0.0.1:13306}
port=${QC_PERF_PORT:-18480} db=qc_perf_cpu res=cpu-per-apply admin=cpuperapplycpuperapply
rcli() { redis-cli -h "${redis%:*}" -p "${redis##*:}" "$@"; }
sql() { mariadb -uroot -h "${mysqlhp%:*}" -P "${mysqlhp##*:}" -N -B "$@"; }
sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
rcli flushdb >/dev/null
extra=()
[[ -n ${QC_PERF_PPROF:-} ]] && extra+=(--pprof-addr "127.0.0.1:$((port + 1))")
QC_ADMIN_TOKENS="cpu:$admin" "$bin" serve --http-addr "127.0.0.1:$port" --redis-addr "$redis" \
	--mysql-dsn "root@tcp($mysqlhp)/$db" --migrate-on-start --log-level warn --insecure-open-quota "${extra[@]}" \
	>"/tmp/cpu-per-apply-$port.log" 2>&1 &
qc=$!
trap 'kill $qc 2>/dev/null; wait $qc 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break; sleep 0.1; done
curl -fsS -o /dev/null -H "Authorization: Bearer $admin" -X PUT -H 'Content-Type: application/json' \
	-d '{"quotaType":"COUNT","totalLimit":9007199254740991,"leakThresholdSeconds":3600}' "http://127.0.0.1:$port/admin/policies/$res"
args=("$res") warm=("$res")
if [[ $scen == heartbeat ]]; then
	args+=("hb-$$" 1000) warm+=("hb-$$" 1000 open) # the warm-up opens the 1000 sessions
fi
wrk -t2 -c"$conns" -d2s -s "scripts/wrk/$scen.lua" "http://127.0.0.1:$port" -- "${warm[@]}" >/dev/null
# Let the warm-up's after-effects pass before measuring: the catch-up of the
# balance rebuilt by its first apply (internal/quota catchup.go: 5 s later it
# reads every row opened since and runs seed.lua over them, ~1 row per
# measured answer) and the give-backs of the requests wrk cut off at its end
# (compensate.go: the scoped form's tried every 200 ms for 3 s).
sleep "${QC_PERF_SETTLE:-6}"
rpid=$(rcli info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
mpid=$(cat "$(sql -e 'SELECT @@pid_file')")
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sys() { awk '/^syscr|^syscw/ {s += $2} END {print s}' "/proc/$1/io"; }
ctx() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s}'; }
snap() { echo "$(cpu $qc) $(cpu "$rpid") $(cpu "$mpid") $(sys $qc) $(sys "$rpid") $(sys "$mpid") $(ctx $qc) $(ctx "$mpid")"; }
rcli config resetstat >/dev/null
before=$(snap)
if [[ -n ${QC_PERF_PPROF:-} ]]; then
	curl -s -o "$QC_PERF_PPROF" "http://127.0.0.1:$((port + 1))/debug/pprof/profile?seconds=${dur%s}" &
	pp=$!
fi
out=$({ time -p wrk -t2 -c"$conns" -d"$dur" --latency -s "scripts/wrk/$scen.lua" "http://127.0.0.1:$port" -- "${args[@]}"; } 2>&1)
after=$(snap)
[[ -n ${QC_PERF_PPROF:-} ]] && wait "$pp"
line=$(grep '^QCWRK ' <<<"$out" | sed 's/^QCWRK //')
wrk_ticks=$(awk '/^user/ {u = $2} /^sys/ {s = $2} END {print (u + s) * 100}' <<<"$out")
calls=$(rcli info commandstats | tr -d '\r' | grep '^cmdstat_' | sed 's/^cmdstat_//')
groups=$(curl -s "http://127.0.0.1:$port/metrics" | grep -E '^(quota_ledger_group_commit_rows_(sum|count)\{op="(insert|finish)"\}|quota_redis_pipeline_calls_(sum|count)) ' | tr ' \n' '= ')
python3 - "$scen" "$conns" "$line" "$before" "$after" "$wrk_ticks" "$calls" "$groups" <<'EOF'
import json, sys
scen, conns, line, before, after, wrk_ticks, calls, groups = sys.argv[1:]
w = json.loads(line)
ok = w["requests"] - w["non2xx"]
d = [float(b) - float(a) for a, b in zip(before.split(), after.split())]
us = lambda ticks: ticks * 1e6 / 100 / ok  # clock ticks of 10 ms
qc, rd, my, wk = us(d[0]), us(d[1]), us(d[2]), us(float(wrk_ticks))
print(f"{scen} c{conns}: {ok / (w['duration_us'] / 1e6):,.0f} 2xx/s, non-2xx {w['non2xx']}, p50 {w['p50_us'] / 1000:.2f} ms, "
      f"p99 {w['p99_us'] / 1000:.2f} ms | CPU us per 2xx: quota-center {qc:.0f}, redis {rd:.0f}, mariadb {my:.0f}, wrk {wk:.0f}, sum {qc + rd + my + wk:.0f}")
per = []
for l in calls.splitlines():
    name, rest = l.split(":", 1)
    kv = dict(x.split("=") for x in rest.split(","))
    if int(kv["calls"]) / ok >= 0.01:
        per.append(f"{name} {int(kv['calls']) / ok:.2f} x {float(kv['usec_per_call']):.1f} us")
print("  redis calls per 2xx (inside scripts too):", ", ".join(per))
print(f"  read+write syscalls per 2xx: quota-center {d[3] / ok:.2f}, redis {d[4] / ok:.2f}, mariadb {d[5] / ok:.2f}; "
      f"context switches per 2xx: quota-center {d[6] / ok:.2f}, mariadb {d[7] / ok:.2f}")
g = {k: float(v) for k, v in (x.rsplit("=", 1) for x in groups.split())}
def per(name, op=""):
    lab = '{op="%s"}' % op if op else ""
    n = g.get(name + "_count" + lab, 0)
    return g.get(name + "_sum" + lab, 0) / n if n else 0
fin = per("quota_ledger_group_commit_rows", "finish")
print(f"  rows per group-commit INSERT {per('quota_ledger_group_commit_rows', 'insert'):.1f}"
      + (f", per finish UPDATE {fin:.1f}" if fin else "")
      + f", calls per Redis pipeline {per('quota_redis_pipeline_calls'):.1f} (warm-up included)")
EOF
