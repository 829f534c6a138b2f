#!/usr/bin/env bash
# scripts/live-metrics.sh — promtool check metrics on a live /metrics (part of
# make lint): builds quota-center, starts it in dev mode on a free loopback
# port, creates a policy and runs one session through it so that every
# per-resource family has samples, then lints the exposition. The server is
# stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

work=$(mktemp -d)
pid=""
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/quota-center" ./cmd/quota-center
QC_REDIS_ADDR= QC_MYSQL_DSN= "$work/quota-center" serve --http-addr 127.0.0.1:0 \
	--dev-sqlite-path "$work/ledger.db" --log-format json >"$work/log" 2>&1 &
pid=$!
addr=""
for _ in $(seq 100); do
	addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$work/log" | head -1)
	[[ -n $addr ]] && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; exit 1; }
	sleep 0.1
done
[[ -n $addr ]] || { echo "quota-center did not say where it listens:" >&2; cat "$work/log" >&2; exit 1; }
url="http://$addr"

curl -fsS -o /dev/null -X PUT "$url/admin/policies/lint_tokens" -H 'Content-Type: application/json' \
	-d '{"quotaType":"TOKENS","totalLimit":100000}'
sid=$(curl -fsS "$url/quota/apply" -H 'Content-Type: application/json' \
	-d '{"resourceName":"lint_tokens","applyAmount":100,"clientId":"lint"}' | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
curl -fsS -o /dev/null "$url/quota/finish" -H 'Content-Type: application/json' \
	-d "{\"resourceName\":\"lint_tokens\",\"sessionId\":\"$sid\",\"actualUsedAmount\":40}"

curl -fsS "$url/metrics" >"$work/metrics"
echo "$(grep -c '^quota_' "$work/metrics") quota_* samples from $url/metrics"
promtool check metrics <"$work/metrics"
