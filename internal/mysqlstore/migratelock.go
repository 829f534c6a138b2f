package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// migrateLockWait is how long Migrate waits for another process' migration
// to finish before it gives up.
var migrateLockWait = 5 * time.Minute

// mysqlMigrateLock is a goose session locker on a MySQL named lock
// (GET_LOCK), one per database: instances or init containers that start
// together run their migrations one after the other, so each migration is
// applied once and the others find nothing pending. The lock belongs to the
// connection goose holds for the run; a process that dies loses it with its
// connection.
type mysqlMigrateLock struct{ wait time.Duration }

// lockName is "quota_center_migrate:<database>", cut to MySQL's 64 characters.
const lockName = "LEFT(CONCAT('quota_center_migrate:', IFNULL(DATABASE(), '')), 64)"

// SessionLock waits up to l.wait for the lock. Errors: the wait ran out,
// or the query failed.
func (l mysqlMigrateLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+lockName+", ?)", int(l.wait.Seconds())).Scan(&got); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("migration lock: another migration held it for %s", l.wait)
	}
	return nil
}

// SessionUnlock releases the lock taken by SessionLock on the same
// connection.
func (l mysqlMigrateLock) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK("+lockName+")").Scan(&released); err != nil {
		return fmt.Errorf("migration unlock: %w", err)
	}
	if !released.Valid || released.Int64 != 1 {
		return errors.New("migration unlock: the lock was not held by this connection")
	}
	return nil
}
