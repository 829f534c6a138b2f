package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/quotacenter/quota-center/internal/quota"
)

// errClosed is returned (wrapped with quota.ErrUnavailable) by calls made
// after Close.
var errClosed = errors.New("store closed")

// MySQL server error numbers that mean the connection or the server is gone
// or cannot take more work.
var mysqlUnavailable = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1053: true, // ER_SERVER_SHUTDOWN
	1152: true, // ER_ABORTING_CONNECTION
	1158: true, // ER_NET_READ_ERROR
	1159: true, // ER_NET_READ_INTERRUPTED
	1160: true, // ER_NET_ERROR_ON_WRITE
	1161: true, // ER_NET_WRITE_INTERRUPTED
	1205: true, // ER_LOCK_WAIT_TIMEOUT
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	2002: true, // CR_CONNECTION_ERROR
	2003: true, // CR_CONN_HOST_ERROR
	2006: true, // CR_SERVER_GONE_ERROR
	2013: true, // CR_SERVER_LOST
	3024: true, // ER_QUERY_TIMEOUT (MySQL max_execution_time)
}

// mysqlDuplicateKey is ER_DUP_ENTRY.
const mysqlDuplicateKey = 1062

// isDuplicateKey reports whether err is a unique-key violation.
func isDuplicateKey(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == mysqlDuplicateKey
	}
	return sqliteDuplicateKey(err)
}

// isUnavailable reports whether err means the database could not be reached
// or did not answer in time (as opposed to rejecting the statement).
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return mysqlUnavailable[me.Number]
	}
	if sqliteUnavailable(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "sql: database is closed")
}

// translate wraps err with op ("get policy x"), adding quota.ErrUnavailable
// when err is a connection failure or timeout. The original error stays in
// the chain.
func translate(op string, err error) error {
	if isUnavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, quota.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
