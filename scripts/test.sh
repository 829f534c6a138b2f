#!/usr/bin/env bash
# scripts/test.sh — the test command behind `make test`.
#
# Checks whether the real backends the integration suites use are reachable,
# says plainly which suites will run and which will be skipped, then runs
# every Go test with the race detector, then go vet and the tests of the
# api module (api/go.mod, the SDK). Arguments, if any, replace ./... as the
# package list of the main module and skip the api module (e.g.
# scripts/test.sh ./internal/quota/...).
#
# Environment:
#   QC_TEST_REDIS_ADDR        Redis host:port          (default 127.0.0.1:6379)
#   QC_TEST_MYSQL_DSN         go-sql-driver DSN        (default root@tcp(127.0.0.1:3306)/)
#   QC_TEST_REQUIRE_BACKENDS  1 = a missing backend (or promtool) is an error, not a skip (CI)
#   QC_TEST_TIMEOUT           go test -timeout         (default 20m)
#   QC_TEST_NO_LOCK           1 = do not queue behind another make test on this machine
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

redis_addr=${QC_TEST_REDIS_ADDR:-127.0.0.1:6379}
mysql_dsn=${QC_TEST_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/}
require=${QC_TEST_REQUIRE_BACKENDS:-0}
timeout=${QC_TEST_TIMEOUT:-20m}
export QC_TEST_REDIS_ADDR=$redis_addr QC_TEST_MYSQL_DSN=$mysql_dsn

# split_hostport ADDR DEFAULT_PORT prints "host port"; handles [v6]:port.
split_hostport() {
	local addr=$1 def=$2 host port
	if [[ $addr =~ ^\[([^]]+)\](:([0-9]+))?$ ]]; then
		host=${BASH_REMATCH[1]} port=${BASH_REMATCH[3]:-$def}
	elif [[ $addr == *:* ]]; then
		host=${addr%:*} port=${addr##*:}
	else
		host=$addr port=$def
	fi
	printf '%s %s\n' "${host:-127.0.0.1}" "${port:-$def}"
}

# reachable HOST PORT: a TCP connect with a 1 s limit, bash /dev/tcp only.
reachable() {
	timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

read -r redis_host redis_port < <(split_hostport "$redis_addr" 6379)

# go-sql-driver DSN: [user[:pass]@][proto[(addr)]]/db[?params]. Only tcp is
# probed; a unix socket counts as reachable when the socket file exists.
mysql_where="" mysql_ok=0
if [[ $mysql_dsn =~ @?unix\(([^\)]*)\) ]]; then
	mysql_where="unix:${BASH_REMATCH[1]}"
	[[ -S ${BASH_REMATCH[1]} ]] && mysql_ok=1
else
	mysql_hostport=127.0.0.1:3306
	if [[ $mysql_dsn =~ tcp\(([^\)]*)\) ]]; then
		mysql_hostport=${BASH_REMATCH[1]:-127.0.0.1:3306}
	fi
	read -r mysql_host mysql_port < <(split_hostport "$mysql_hostport" 3306)
	mysql_where="$mysql_host:$mysql_port"
	[[ $mysql_host == *:* ]] && mysql_where="[$mysql_host]:$mysql_port"
	reachable "$mysql_host" "$mysql_port" && mysql_ok=1
fi
redis_ok=0
reachable "$redis_host" "$redis_port" && redis_ok=1

missing=()
((redis_ok)) || missing+=(redis)
((mysql_ok)) || missing+=(mariadb)

how_to_start() {
	local what
	echo "  To run them, start the missing server(s) on this machine (as root), then run make test again:"
	for what in "${missing[@]}"; do
		case $what in
		redis)
			echo "    # Redis on 127.0.0.1:6379"
			echo "    mkdir -p /var/lib/redis /var/log/redis"
			echo "    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save \"\" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
			;;
		mariadb)
			echo "    # MariaDB on 127.0.0.1:3306 (tests log in as root without a password)"
			echo "    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld"
			echo "    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
			;;
		esac
	done
	echo "  Or point QC_TEST_REDIS_ADDR / QC_TEST_MYSQL_DSN at servers that are running. (As root, bash .ci/run starts both and runs the tests with nothing skipped.)"
}

skip_notice() {
	echo "!! SKIPPED: the real-backend suites for: ${missing[*]}"
	echo "!! Those tests were skipped (go test -v shows each SKIP); everything that runs on the embedded dev-mode backends did run."
	how_to_start
}

line='------------------------------------------------------------------------'
skipped="will be SKIPPED"
[[ $require == 1 ]] && skipped="MISSING (QC_TEST_REQUIRE_BACKENDS=1 needs them)"
echo "$line"
echo "quota-center tests: go test -race -count=1 -timeout $timeout ${*:-./...}"
if ((redis_ok)); then
	echo "  Redis    $redis_addr  reachable      -> Redis suites run (Lua scripts, TTLs, keys on real Redis)"
else
	echo "  Redis    $redis_addr  NOT reachable  -> Redis suites $skipped"
fi
if ((mysql_ok)); then
	echo "  MariaDB  $mysql_where  reachable      -> MySQL suites run (migrations, ledger, a fresh database per package)"
else
	echo "  MariaDB  $mysql_where  NOT reachable  -> MySQL suites $skipped"
fi
echo "  Dev-mode suites (miniredis + SQLite) always run."
if command -v chromium >/dev/null || [[ -n ${QC_TEST_CHROMIUM:-} ]]; then
	echo "  Chromium found               -> the console's browser tests run (internal/console)"
else
	echo "  Chromium NOT found           -> the console's browser tests $skipped (apt-get install chromium chromium-driver)"
fi
if ((${#missing[@]})); then
	if [[ $require == 1 ]]; then
		echo "!! QC_TEST_REQUIRE_BACKENDS=1 but ${missing[*]} is not reachable: refusing to run with skips." >&2
		how_to_start >&2
		echo "$line"
		exit 1
	fi
	how_to_start
fi
echo "$line"

# Two runs on one machine share its Redis, MariaDB and cores: their short
# backend deadlines then fail under the doubled load. Queue behind a running
# one instead (QC_TEST_NO_LOCK=1 skips the queue).
if [[ ${QC_TEST_NO_LOCK:-0} != 1 ]] && command -v flock >/dev/null; then
	exec 9>"${TMPDIR:-/tmp}/quota-center-make-test.lock"
	if ! flock -n 9; then
		echo "another make test is running on this machine: waiting for it to finish (QC_TEST_NO_LOCK=1 to skip)"
		flock 9
	fi
fi

rc=0
go test -race -count=1 -timeout "$timeout" "${@:-./...}" || rc=$?
# api/ is its own Go module (the SDK's small dependency set) and the deploy
# files' checks are their own module (deploy/checks: dashboard linter rules,
# kustomize build with strict decoding, compose loader, PrometheusRule in sync,
# promtool), so ./... above reaches neither: test both with the whole suite.
if (($# == 0)); then
	echo "$line"
	echo "api module (api/go.mod): go vet ./... and go test -race -count=1 ./..."
	(cd api && go vet ./... && go test -race -count=1 -timeout "$timeout" ./...) || rc=$?
	echo "$line"
	echo "deploy checks: (cd deploy/checks && go test -count=1 ./...)"
	(cd deploy/checks && go test -count=1 -timeout "$timeout" ./...) || rc=$?
fi

echo "$line"
if ((rc == 0)); then
	echo "go test: PASS"
else
	echo "go test: FAIL (exit $rc)"
fi
if ((${#missing[@]})); then
	skip_notice
fi
echo "$line"
exit "$rc"
