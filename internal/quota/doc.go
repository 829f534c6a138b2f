// Package quota is the domain of quota-center: policies, periods, sessions
// (leases) and the Service that applies, heartbeats, finishes and reports on
// them.
//
// It holds the accounting rules and nothing else. It imports only the
// standard library, golang.org/x/sync/singleflight and internal/pools (the
// pool rules, standard library only): Redis, MySQL, HTTP,
// circuit breakers and cron parsing live in adapters (internal/redisstore,
// internal/mysqlstore, internal/httpapi, internal/breaker, internal/period)
// that import this package, never the other way round. It declares the
// small interfaces it calls (ports.go) and the one helper through which
// every store call meets its circuit breaker (Guard).
package quota
