// Package quota is the domain of quota-center: policies, periods, sessions
// (leases) and the Service that applies, heartbeats, finishes and reports on
// them.
//
// It holds the accounting rules and nothing else. It imports only the
// standard library: Redis, MySQL, HTTP and cron parsing live in adapters
// (internal/redisstore, internal/mysqlstore, internal/httpapi,
// internal/period) that import this package, never the other way round.
package quota
