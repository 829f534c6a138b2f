#!/usr/bin/env bash
# scripts/redis-cluster.sh — a throwaway Redis Cluster on loopback for tests:
# 3 masters and 3 replicas (one per master) on ports BASE..BASE+5, from the
# machine's redis-server, no persistence.
#
# Usage: scripts/redis-cluster.sh start|stop|status [BASE_PORT]
#   start   idempotent: returns at once when the cluster at BASE answers with
#           cluster_state:ok, 3 masters each with a replica in sync;
#           otherwise stops what is left of it, wipes its directory and
#           creates it afresh (a few seconds). Concurrent starts (parallel
#           test packages) take a lock and the later ones find it up.
#   stop    stops the six servers (by their pid files) and removes the data.
#   status  exits 0 when the cluster is up as described.
#
# Environment:
#   QC_REDIS_CLUSTER_BASE_PORT     first port (default 7000); BASE_PORT wins
#   QC_REDIS_CLUSTER_DIR           data directory (default /tmp/qc-redis-cluster-BASE)
#   QC_REDIS_CLUSTER_NODE_TIMEOUT  cluster-node-timeout in ms (default 15000):
#                                  how long a master must be unreachable before
#                                  its replica is promoted. The suites' shared
#                                  cluster keeps its roles through a loaded
#                                  machine's stalls (at 2000 a master was seen
#                                  replaced mid-run at load ~50); the failover
#                                  tests start clusters of their own with 1000
#
# .ci/run calls `start`; the Go test helpers (internal/testenv) call it too
# when the cluster does not answer, so `make test` works on a fresh machine.
set -euo pipefail

cmd=${1:-}
base=${2:-${QC_REDIS_CLUSTER_BASE_PORT:-7000}}
dir=${QC_REDIS_CLUSTER_DIR:-/tmp/qc-redis-cluster-$base}
node_timeout=${QC_REDIS_CLUSTER_NODE_TIMEOUT:-15000}
ports=()
for i in 0 1 2 3 4 5; do ports+=($((base + i))); done

die() { echo "redis-cluster.sh: $*" >&2; exit 1; }
[[ $base =~ ^[0-9]+$ ]] || die "base port must be a number, got '$base'"

cli() { local p=$1; shift; redis-cli -h 127.0.0.1 -p "$p" "$@" 2>/dev/null; }

# up: every node answers, the cluster is ok, 3 masters with slots and 3
# replicas whose link to their master is up.
up() {
	local p masters=0 replicas=0
	for p in "${ports[@]}"; do
		cli "$p" cluster info | grep -q '^cluster_state:ok' || return 1
		case $(cli "$p" role | head -n1) in
		master) masters=$((masters + 1)) ;;
		slave)
			cli "$p" info replication | grep -q '^master_link_status:up' || return 1
			replicas=$((replicas + 1))
			;;
		*) return 1 ;;
		esac
	done
	((masters == 3 && replicas == 3))
}

stop_nodes() {
	local p pid
	for p in "${ports[@]}"; do
		[[ -f $dir/$p/redis.pid ]] || continue
		pid=$(<"$dir/$p/redis.pid")
		# Only a redis-server started from this directory.
		if [[ -n $pid ]] && grep -q "redis-server" "/proc/$pid/cmdline" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	# A node whose pid file is gone (a test run killed after it wiped the
	# directory) still holds its port and its old cluster state, and a new
	# `--cluster create` then fails with "node is not empty": shut down
	# whatever still answers on these test ports.
	for p in "${ports[@]}"; do
		cli "$p" ping | grep -qx PONG || continue
		cli "$p" shutdown nosave >/dev/null || true
		wait_until 5 bash -c "! redis-cli -h 127.0.0.1 -p $p ping 2>/dev/null | grep -qx PONG" ||
			die "a server on port $p did not shut down"
	done
}

# wait_until SECONDS CHECK...: polls CHECK every 100 ms.
wait_until() {
	local deadline=$((SECONDS + $1)); shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

case $cmd in
status)
	up
	;;
stop)
	stop_nodes
	rm -rf "$dir"
	;;
start)
	command -v redis-server >/dev/null || die "redis-server is not installed (apt-get install redis-server)"
	command -v redis-cli >/dev/null || die "redis-cli is not installed (apt-get install redis-tools)"
	mkdir -p "$(dirname "$dir")"
	exec 9>"$dir.lock"
	flock -w 120 9 || die "another start holds $dir.lock"
	if up; then
		echo "Redis Cluster on 127.0.0.1:${ports[0]}-${ports[5]} already up"
		exit 0
	fi
	stop_nodes
	rm -rf "$dir"
	for p in "${ports[@]}"; do
		mkdir -p "$dir/$p"
		redis-server --port "$p" --bind 127.0.0.1 --daemonize yes \
			--dir "$dir/$p" --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" \
			--save "" --appendonly no \
			--cluster-enabled yes --cluster-config-file nodes.conf \
			--cluster-node-timeout "$node_timeout" \
			--cluster-replica-validity-factor 0 --cluster-require-full-coverage no 9>&-
	done
	for p in "${ports[@]}"; do
		wait_until 10 bash -c "redis-cli -h 127.0.0.1 -p $p ping 2>/dev/null | grep -qx PONG" ||
			die "redis-server on port $p did not start: $(tail -n 5 "$dir/$p/redis.log" 2>/dev/null)"
	done
	addrs=()
	for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
	# Bounded: create waits for the nodes to agree with no limit of its own,
	# and hung for 17 minutes (the test's whole budget) when another run
	# started servers on the same ports meanwhile.
	timeout 90 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 9>&- ||
		die "redis-cli --cluster create failed or took over 90s: $(tail -n 20 "$dir/create.log")"
	wait_until 30 up || die "the cluster on ${ports[0]}-${ports[5]} did not become ok within 30s"
	echo "Redis Cluster on 127.0.0.1:${ports[0]}-${ports[5]} started ($dir)"
	;;
*)
	die "usage: $0 start|stop|status [BASE_PORT]"
	;;
esac
