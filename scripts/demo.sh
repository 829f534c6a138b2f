#!/usr/bin/env bash
# scripts/demo.sh — the main job end to end, behind `make demo`.
#
# Builds the binaries, starts bin/quota-center (dev mode unless QC_REDIS_ADDR
# and QC_MYSQL_DSN are set), waits for /readyz, replays the Azure LLM trace
# through it with bin/qc-replay, stops the server and exits with qc-replay's
# exit code (non-zero when the server's usedAmount disagrees with what
# qc-replay charged). Extra arguments are passed on to qc-replay.
#
# Credentials: the demo sets QC_ADMIN_TOKENS and QC_API_KEYS for the server it
# starts, whatever the environment says. In dev mode it clears both (admin and
# client endpoints open, as `make run` has them). Against real backends it
# makes a random admin token (QC_ADMIN_TOKENS=demo:<token>) and a random API key
# for client qc-replay on every resource (QC_API_KEYS=<key>=qc-replay:*), and
# gives them to qc-replay with --admin-token and --api-key; they live only as
# long as the demo and are never printed.
#
# Environment:
#   QC_DEMO_ADDR          listen address of the demo server (default 127.0.0.1:18080)
#   QC_DEMO_LIMIT         --limit for qc-replay, in tokens      (default 12000000)
#   QC_DEMO_CONCURRENCY   --concurrency for qc-replay          (default 16)
#   QC_DEMO_READY_TIMEOUT seconds to wait for /readyz          (default 60)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

addr=${QC_DEMO_ADDR:-127.0.0.1:18080}
limit=${QC_DEMO_LIMIT:-12000000}
concurrency=${QC_DEMO_CONCURRENCY:-16}
ready_timeout=${QC_DEMO_READY_TIMEOUT:-60}
url="http://$addr"
case $addr in
:*) url="http://127.0.0.1$addr" ;;
0.0.0.0:*) url="http://127.0.0.1:${addr##*:}" ;;
esac
host=${addr%:*} port=${addr##*:}
[[ -z $host || $host == 0.0.0.0 ]] && host=127.0.0.1
host=${host#[} host=${host%]}

say() { printf '==> %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

# http_ok PATH: true when GET PATH answers 200 within 2 s. curl when present,
# else a plain HTTP/1.0 request over bash /dev/tcp.
http_ok() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -o /dev/null --max-time 2 "$url$1" 2>/dev/null
		return
	fi
	timeout 2 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3
		IFS= read -r status <&3
		[[ $status == "HTTP/"*" 200"* ]]' _ "$host" "$port" "$1" 2>/dev/null
}

if timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" 2>/dev/null; then
	die "$addr is already in use; set QC_DEMO_ADDR to a free host:port"
fi

# random_secret prints 48 hex characters from /dev/urandom.
random_secret() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# replay_auth: qc-replay's credential flags (empty in dev mode).
replay_auth=()
if [[ -z ${QC_REDIS_ADDR:-} && -z ${QC_MYSQL_DSN:-} ]]; then
	mode="dev mode (in-process miniredis + SQLite; nothing is kept; no admin token or API key)"
	admin_tokens="" api_keys=""
elif [[ -n ${QC_REDIS_ADDR:-} && -n ${QC_MYSQL_DSN:-} ]]; then
	mode="Redis $QC_REDIS_ADDR + MySQL from QC_MYSQL_DSN, with a demo admin token and API key"
	admin_token=$(random_secret) api_key=$(random_secret)
	((${#admin_token} == 48 && ${#api_key} == 48)) || die "could not read random bytes from /dev/urandom"
	admin_tokens="demo:$admin_token" api_keys="$api_key=qc-replay:*"
	replay_auth=(--admin-token "$admin_token" --api-key "$api_key")
else
	die "set both QC_REDIS_ADDR and QC_MYSQL_DSN, or neither for dev mode"
fi

say "make build"
make build

workdir=$(mktemp -d "${TMPDIR:-/tmp}/qc-demo.XXXXXX")
log=$workdir/server.log
server_pid=""

stop_server() {
	local rc=$? i
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		say "stopping quota-center (pid $server_pid)"
		kill -TERM "$server_pid" 2>/dev/null || true
		for ((i = 0; i < 200; i++)); do
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$server_pid" 2>/dev/null; then
			echo "demo: server did not stop in 20s; killing it" >&2
			kill -KILL "$server_pid" 2>/dev/null || true
		fi
		wait "$server_pid" 2>/dev/null || true
	fi
	if ((rc != 0)) && [[ -s $log ]]; then
		echo "demo: last lines of the server log ($log):" >&2
		tail -n 30 "$log" >&2
	else
		rm -rf "$workdir"
	fi
}
trap stop_server EXIT

say "starting bin/quota-center serve on $addr: $mode (log: $log)"
QC_HTTP_ADDR=$addr QC_LOG_FORMAT=${QC_LOG_FORMAT:-console} \
	QC_ADMIN_TOKENS=$admin_tokens QC_API_KEYS=$api_keys \
	bin/quota-center serve >"$log" 2>&1 &
server_pid=$!

say "waiting up to ${ready_timeout}s for $url/readyz"
deadline=$((SECONDS + ready_timeout))
until http_ok /readyz; do
	kill -0 "$server_pid" 2>/dev/null || die "quota-center exited before it was ready"
	((SECONDS < deadline)) || die "quota-center not ready after ${ready_timeout}s"
	sleep 0.2
done
say "ready"

shown_auth=""
((${#replay_auth[@]} == 0)) || shown_auth=" --admin-token *** --api-key ***"
say "bin/qc-replay --url $url --limit $limit --concurrency $concurrency$shown_auth $*"
rc=0
bin/qc-replay --url "$url" --limit "$limit" --concurrency "$concurrency" ${replay_auth[@]+"${replay_auth[@]}"} "$@" || rc=$?
if ((rc == 0)); then
	say "qc-replay passed: the server's usedAmount matches what was charged"
else
	echo "demo: qc-replay exited with $rc" >&2
fi
exit "$rc"
