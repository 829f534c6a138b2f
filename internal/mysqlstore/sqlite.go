//go:build !nodev

package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver

	"github.com/quotacenter/quota-center/migrations"
)

// The SQLite ledger is dev mode's; a build with -tags nodev leaves it and
// its driver out (sqlite_nodev.go).

var dialectSQLite = dialect{
	name:                 "sqlite",
	goose:                goose.DialectSQLite3,
	migrations:           mustSub(migrations.SQLite, "sqlite"),
	insertPolicyIfAbsent: insertPolicyPrefix + ` ON CONFLICT (resource_name) DO NOTHING`,
	lifecycle:            lifecycleSQLite,
	// SQLite's planner takes the period indexes (EXPLAIN QUERY PLAN in
	// TestPeriodTotalsOfARolledUpPeriodStartAtTheWatermark): no hint.
	periodTotals: periodTotalsQuery(func(string) string { return "" }),
}

const (
	// sqliteBusyTimeoutMs is how long SQLite waits for a lock held by another
	// connection before it returns SQLITE_BUSY.
	sqliteBusyTimeoutMs = 5000
	// sqliteMinQueryTimeout is the shortest query deadline on SQLite, where
	// every query waits its turn on one connection.
	sqliteMinQueryTimeout = 10 * time.Second
)

// SQLite result codes (extended codes are on in modernc.org/sqlite).
const (
	sqliteBusy                 = 5    // SQLITE_BUSY (primary code)
	sqliteLocked               = 6    // SQLITE_LOCKED (primary code)
	sqliteConstraintPrimaryKey = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteConstraintUnique     = 2067 // SQLITE_CONSTRAINT_UNIQUE
)

// OpenSQLite opens (creating it if needed) the SQLite database at path with
// the pure-Go driver "sqlite". path ":memory:" gives a private in-memory
// database held by a single connection, so every call sees the same data; a
// file uses WAL journaling (other processes may read it meanwhile). Either way
// this store talks to SQLite over one connection: SQLite runs one writer at a
// time, and one connection queues writers in Go instead of letting them spin
// on the busy lock. For the same reason a query may wait at least 10 s
// (QueryTimeout is raised to that). SQLite is the dev-mode ledger, not a
// production one. Errors: the open or ping error.
func OpenSQLite(ctx context.Context, path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	opts.QueryTimeout = max(opts.QueryTimeout, sqliteMinQueryTimeout)
	dsn := fmt.Sprintf("%s?_busy_timeout=%d", path, sqliteBusyTimeoutMs)
	memory := path == ":memory:"
	if !memory {
		dsn += "&_journal_mode=WAL"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One connection, kept forever (each connection to ":memory:" is its own
	// database).
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return newStore(ctx, sqlx.NewDb(db, "sqlite"), dialectSQLite, opts)
}

// sqliteDuplicateKey reports whether err is SQLite's unique or primary-key
// violation.
func sqliteDuplicateKey(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqliteConstraintUnique || se.Code() == sqliteConstraintPrimaryKey
	}
	return false
}

// sqliteUnavailable reports whether err is SQLite's busy or locked.
func sqliteUnavailable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		primary := se.Code() & 0xff
		return primary == sqliteBusy || primary == sqliteLocked
	}
	return false
}
