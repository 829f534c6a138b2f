// Package mysqlstore is the SQL adapter of quota-center: it keeps policies
// (quota.PolicyStore) and the durable session ledger (quota.Ledger) in MySQL
// (or MariaDB) in production and in SQLite (modernc.org/sqlite, pure Go) in
// tests and single-node runs.
//
// Both dialects share one schema (see package migrations, applied with
// Store.Migrate) and almost all SQL; a small dialect value holds the few
// differences. Times are stored as BIGINT Unix milliseconds in UTC, amounts
// in the policy's unit.
//
// Ledger writes are group-committed: concurrent InsertSession calls are
// gathered by one goroutine into one multi-row INSERT, concurrent
// FinishSession calls by another into one multi-row UPDATE, and each call
// returns only once the statement carrying its row is committed. A failed
// batch is retried row by row, so each call gets its own answer.
//
// Driver errors are translated at this boundary: connection failures and
// timeouts wrap quota.ErrUnavailable, a duplicate session id wraps
// quota.ErrDuplicateSession, missing rows wrap quota.ErrResourceNotFound or
// quota.ErrSessionNotFound.
//
// The package imports internal/quota and never internal/httpapi or
// internal/redisstore.
package mysqlstore
