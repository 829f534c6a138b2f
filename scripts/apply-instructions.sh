#!/usr/bin/env bash
# scripts/apply-instructions.sh — instructions of redis-server per new plain
# apply (apply.lua as quota-center's POST /quota/apply sends it: a scoped id,
# an attempt, the first period, no end), counted by callgrind, which does
# not move with the machine's load (docs/performance-notes.md, "Issue 23 §3
# (c): the plain apply's fast path").
#
#   scripts/apply-instructions.sh [ROOT] [PORT] [N1] [N2]
#     ROOT  a checkout whose internal/redisstore/scripts are measured (default .)
#     PORT  a free port for a private redis-server under valgrind (default 17391)
#     N1 N2 two runs' apply counts (default 500 2500)
#   OLDARGS=1 sends ARGV[11] "0" (apply.lua before the fast path).
#   FINISH=1 also finishes each session (finish.lua as Store.Finish sends it,
#   actual 0, after all the applies): the figure is then per apply
#   and its finish; the finish's alone is its difference from a run without.
#
# Each run starts redis-server under callgrind, seeds one balance, sends N
# EVALSHA of new sessions through redis-cli --pipe and stops it; per apply is
# the difference of the two runs' totals, less serverCron's, over N2 − N1.
set -euo pipefail
root=$(cd "${1:-.}" && pwd) port=${2:-17391} n1=${3:-500} n2=${4:-2500}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
drive() { # drive N SHA|src: the expanded script, or N EVALSHA in RESP
	python3 - "$root" "$@" <<'PY'
import os, re, sys
root, n, sha = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def src(name):
    out = []
    for l in open(os.path.join(root, "internal/redisstore/scripts", name)):
        m = re.match(r"\s*-- include (\S+)\s*$", l)
        out.append(src(m.group(1)) + "\n" if m else l)
    return "".join(out)
if sha in ("src", "finsrc"):
    sys.stdout.write(src("apply.lua" if sha == "src" else "finish.lua"))
    sys.exit()
fsha = sys.argv[4] if len(sys.argv) > 4 else ""
def cmd(*a):
    s = "*%d\r\n" % len(a)
    for x in map(str, a):
        s += "$%d\r\n%s\r\n" % (len(x.encode()), x)
    return s
r, per = "cpu-per-apply", "1796312707686"
w = sys.stdout.write
for i in range(1, n + 1):
    sid, att = "%032x" % i, "%032x" % (i * 7919)
    keys = ["qc:{%s}:limit" % r, "qc:{%s}:b:%s" % (r, per), "qc:{%s}:s:%s" % (r, sid), "qc:{%s}:leases" % r,
            "qc:{%s}:s:%s/wrk/%s" % (r, r, sid)]
    args = ["1", "0", "wrk", per, "0", "3600000", sid, "1", att, "%s/wrk/%s" % (r, sid)]
    if os.environ.get("OLDARGS"):
        args.append("0")
    w(cmd("EVALSHA", sha, 5, *keys, *args))
for i in range(1, n + 1) if fsha else ():
    sid = "%032x" % i
    keys = ["qc:{%s}:s:%s" % (r, sid), "qc:{%s}:leases" % r, "qc:{%s}:limit" % r, "qc:{%s}:b:%s" % (r, per),
            "qc:{%s}:gr" % r]
    w(cmd("EVALSHA", fsha, 5, *keys, "0", "86400000", sid, "wrk", per))
PY
}
run() { # run N: prints "total serverCron"
	local n=$1 f=$out/cg.$1
	valgrind --tool=callgrind --callgrind-out-file="$f" redis-server --port "$port" --save "" --appendonly no >/dev/null 2>&1 &
	local vg=$!
	for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.3; done
	local sha fsha=
	sha=$(redis-cli -p "$port" script load "$(drive 0 src)")
	[[ -n ${FINISH:-} ]] && fsha=$(redis-cli -p "$port" script load "$(drive 0 finsrc)")
	redis-cli -p "$port" set 'qc:{cpu-per-apply}:limit' 9007199254740991 >/dev/null
	redis-cli -p "$port" hset 'qc:{cpu-per-apply}:b:1796312707686' charged 0 reserved 0 ep 1 >/dev/null
	drive "$n" "$sha" $fsha | redis-cli -p "$port" --pipe >/dev/null
	if [[ -n $fsha ]]; then
		[[ $(redis-cli -p "$port" hmget 'qc:{cpu-per-apply}:b:1796312707686' reserved charged | tr '\n' ' ') == "0 0 " ]] || echo "not all $n finished" >&2
	else
		[[ $(redis-cli -p "$port" hget 'qc:{cpu-per-apply}:b:1796312707686' reserved) == "$n" ]] || echo "not all $n granted" >&2
	fi
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$vg" || true
	echo "$(grep -m1 '^summary:\|^totals:' "$f" | awk '{print $2}') $(callgrind_annotate --inclusive=yes "$f" | grep -m1 serverCron | awk '{gsub(",", "", $1); print $1}')"
}
read -r t1 c1 < <(run "$n1")
read -r t2 c2 < <(run "$n2")
echo "instructions per apply${FINISH:+ and its finish}: $(((t2 - c2 - t1 + c1) / (n2 - n1))) (runs of $n1 and $n2; load $(cut -d' ' -f1-3 /proc/loadavg))"
