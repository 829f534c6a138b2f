# scripts/bench-floor.sh — sourced by scripts/bench.sh (not run alone): the
# "baseline+ledger" server of the wrk runs (issue 11 §1), the floor of what a
# durable ledger row per apply costs on this machine, in the same run.
#
# It is qc-baseline with --mysql-dsn: the same one EVALSHA per request, sent
# through quota-center's own Redis path (the auto-pipelined store of
# internal/redisstore, built as quota-center serve builds it), then the
# session's ledger row written through quota-center's own group commit
# (internal/mysqlstore, quota-center's migrations, so the row and the
# statement are those quota-center writes), answered only once committed; a
# finish settles the row the same way. No validation beyond the baseline's,
# no metrics, no middleware. It runs in the apply and session wrk scenarios,
# interleaved with the other servers, on the benchmark's Redis and MariaDB,
# in a database of its own (created fresh, dropped at the end).
#
# Environment (besides bench.sh's):
#   QC_BENCH_FLOOR       0 = leave the baseline+ledger server out       (default 1)
#   QC_BENCH_FLOOR_PORT  its port on 127.0.0.1                          (default 18086)
#   QC_BENCH_FLOOR_DB    its MariaDB database, created and dropped      (default ${QC_BENCH_DB}_floor)
#
# Uses bench.sh's variables (db, run_id, redis, mysql_host, mysql_port,
# leak_threshold, work) and functions (say, die, sql, rcli, port_busy,
# wait_ready, meta).

LABEL_FLOOR=baseline+ledger
floor_on=${QC_BENCH_FLOOR:-1}
floor_port=${QC_BENCH_FLOOR_PORT:-18086}
floor_db=${QC_BENCH_FLOOR_DB:-${db}_floor}
floor_url=http://127.0.0.1:$floor_port
floor_res=bench-floor-$run_id
floor_pid=""
floor_flags=(--addr "127.0.0.1:$floor_port" --redis-addr "$redis" --resource "$floor_res" --lease "${leak_threshold}s"
	--mysql-dsn "root@tcp($mysql_host:$mysql_port)/$floor_db")

# floor_check: refuses a busy port before anything starts.
floor_check() {
	[[ $floor_on == 0 ]] && return 0
	port_busy "$floor_port" && die "127.0.0.1:$floor_port is in use; set QC_BENCH_FLOOR_PORT"
	[[ $floor_db != "$db" ]] || die "QC_BENCH_FLOOR_DB must differ from QC_BENCH_DB ($db)"
}

# floor_wanted SCENARIO: whether the floor runs in that wrk scenario.
floor_wanted() { [[ -n $floor_pid && ($1 == apply || $1 == session) ]]; }

# floor_start: a fresh database, then the server (it migrates it at start).
floor_start() {
	[[ $floor_on == 0 || " $wrk_scenarios " != *" apply "* && " $wrk_scenarios " != *" session "* ]] && return 0
	say "starting baseline+ledger (qc-baseline --mysql-dsn) on $floor_url (MariaDB $mysql_host:$mysql_port/$floor_db)"
	sql -e "DROP DATABASE IF EXISTS $floor_db; CREATE DATABASE $floor_db"
	bin/qc-baseline "${floor_flags[@]}" >"$work/$LABEL_FLOOR.log" 2>&1 &
	floor_pid=$!
	wait_ready "$floor_url/healthz" || { tail -20 "$work/$LABEL_FLOOR.log" >&2; die "baseline+ledger did not start"; }
}

# floor_halt: stops the server and adds the ledger rows it wrote to
# floor_rows and floor_settled (its database is made again by floor_start).
floor_rows=0 floor_settled=0 floor_ran=""
floor_halt() {
	[[ -n $floor_pid ]] || return 0
	stop "$floor_pid" "$LABEL_FLOOR"
	floor_pid="" floor_ran=1
	floor_rows=$((floor_rows + $(sql -e "SELECT COUNT(*) FROM $floor_db.quota_usage" 2>/dev/null || echo 0)))
	floor_settled=$((floor_settled + $(sql -e "SELECT COUNT(*) FROM $floor_db.quota_usage WHERE status = 'FINISHED'" 2>/dev/null || echo 0)))
}

# floor_stop: stops the server and notes how many ledger rows it wrote.
floor_stop() {
	floor_halt
	[[ -n $floor_ran ]] || return 0
	meta note "baseline+ledger wrote $floor_rows ledger rows ($floor_settled of them settled by a finish), warm-ups included."
}

# floor_meta: the report's description of the server.
floor_meta() {
	[[ -n $floor_pid ]] || return 0
	meta how "baseline+ledger (qc-baseline --mysql-dsn) is the floor of a durable ledger: qc-baseline's one EVALSHA per request, sent through quota-center's own auto-pipelined Redis path (internal/redisstore at quota-center's defaults, where qc-baseline sends each call on its own), plus each granted apply's ledger row (and each finish's settling update) written through quota-center's own group commit (internal/mysqlstore's InsertSession and FinishSession at quota-center's defaults, on quota-center's migrated schema, in a database of its own, $floor_db), the answer sent only once the row is committed; no validation beyond qc-baseline's, no metrics or middleware. It runs in the apply and session wrk scenarios only."
	meta command "bin/qc-baseline ${floor_flags[*]}   # baseline+ledger"
}

# floor_cleanup: at exit, stop it and remove its keys and database.
floor_cleanup() {
	stop "$floor_pid" "$LABEL_FLOOR"
	floor_pid=""
	[[ $floor_on == 0 || $keep == 1 ]] && return 0
	rcli --scan --pattern "qc:{$floor_res}:*" 2>/dev/null | xargs -r -n 500 echo UNLINK | rcli >/dev/null 2>&1 || true
	sql -e "DROP DATABASE IF EXISTS $floor_db" 2>/dev/null || true
}
