//go:build nodev

package mysqlstore

import (
	"context"
	"errors"
)

// OpenSQLite fails: this build (-tags nodev) has no SQLite driver; the
// SQLite ledger is dev mode's.
func OpenSQLite(context.Context, string, Options) (*Store, error) {
	return nil, errors.New("open sqlite: not in this binary (built with -tags nodev)")
}

func sqliteDuplicateKey(error) bool { return false }

func sqliteUnavailable(error) bool { return false }
