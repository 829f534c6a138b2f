// Package redisstore keeps live balances and sessions in Redis and
// implements quota.BalanceStore. Every change is one Lua script
// (scripts/*.lua, embedded), so a check and its reservation, or a finish and
// its refund, happen atomically with no lock and no deduct-then-check.
//
// Key layout, all hash-tagged by resource; every key a script touches is
// declared in its KEYS (scripts.go), so that one script runs on the one
// cluster node of the resource's slot:
//
//	qc:{r}:limit         string  the resource's totalLimit
//	qc:{r}:b:<periodMs>  hash    charged, reserved of one period
//	qc:{r}:s:<session>   hash    one session (amount, granted, lease, status …; or status,
//	                             lease and a packed record r: record.go, scripts/session_record.lib)
//	qc:{r}:leases        zset    USING sessions by lease expiry (ms)
//	qc:{r}:leaked        set     swept sessions whose ledger row is not yet LEAKED
//	qc:{r}:lock:<name>   string  a short lock (seeding a period's balance, reconciling)
//	qc:{r}:adj:<token>   string  a drift correction that was applied (adjust.lua; 10 min)
//	qc:{r}:failopen      set     fail-open sessions whose ledger rows are still to be written
//	qc:{r}:pl            hash    pools: layout and live moves of the business lines (apply.lua)
//	qc:{r}:gr            hash    pools: temporary grants and what is held of each
//
// On Redis Cluster each call runs on the master of the resource's slot; a
// failed call has the client learn the slot map again (a failover). Wait
// (WithWait) makes state-changing calls wait for replicas before they are
// answered; Masters tells which master holds each resource, for the
// failover watcher (internal/failover).
//
// Scripts are run with EVALSHA and fall back to EVAL on NOSCRIPT (go-redis
// Script.Run), so a SCRIPT FLUSH costs one extra round trip. Every mutating
// script is idempotent by session id, so go-redis retrying a call that timed
// out after Redis ran it never charges twice.
//
// It imports quota and go-redis; never httpapi or mysqlstore.
package redisstore
