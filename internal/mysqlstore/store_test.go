package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestMigrateTwiceIsNoop(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		mustInsert(t, s, usingRec("kept", 9))
		if _, _, err := s.PutPolicy(ctx, testPolicy("kept", 1, t0)); err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		var applied []int64
		if err := s.DB().SelectContext(ctx, &applied,
			"SELECT version_id FROM goose_db_version WHERE version_id > 0 ORDER BY id"); err != nil {
			t.Fatal(err)
		}
		files, err := fs.Glob(s.dialect.migrations, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int64, len(files)) // 00001_…, 00002_…: each file's number, in order
		for i, f := range files {
			v, err := strconv.ParseInt(f[:strings.IndexByte(f, '_')], 10, 64)
			if err != nil {
				t.Fatalf("migration %s: %v", f, err)
			}
			want[i] = v
		}
		if fmt.Sprint(applied) != fmt.Sprint(want) {
			t.Fatalf("applied versions = %v; want %v", applied, want)
		}
		if got := mustSession(t, s, "kept"); got != usingRec("kept", 9) {
			t.Fatalf("row lost: %+v", got)
		}
		if _, err := s.GetPolicy(ctx, "kept"); err != nil {
			t.Fatalf("policy lost: %v", err)
		}
	})
}

// calls exercises every method of the ports once.
var calls = []struct {
	name string
	call func(ctx context.Context, s *Store) error
}{
	{"InsertSession", func(ctx context.Context, s *Store) error { return s.InsertSession(ctx, usingRec("u", 1)) }},
	{"FinishSession", func(ctx context.Context, s *Store) error {
		return s.FinishSession(ctx, quota.UsageRecord{SessionID: "u"})
	}},
	{"MarkLeaked", func(ctx context.Context, s *Store) error {
		return s.MarkLeaked(ctx, []quota.LeakedSession{{SessionID: "u"}})
	}},
	{"Session", func(ctx context.Context, s *Store) error { _, err := s.Session(ctx, "u"); return err }},
	{"PeriodTotals", func(ctx context.Context, s *Store) error { _, err := s.PeriodTotals(ctx, "gpu", period); return err }},
	{"GetPolicy", func(ctx context.Context, s *Store) error { _, err := s.GetPolicy(ctx, "gpu"); return err }},
	{"ListPolicies", func(ctx context.Context, s *Store) error { _, err := s.ListPolicies(ctx); return err }},
	{"PutPolicy", func(ctx context.Context, s *Store) error {
		_, _, err := s.PutPolicy(ctx, testPolicy("gpu", 1, t0))
		return err
	}},
	{"Ping", func(ctx context.Context, s *Store) error { return s.Ping(ctx) }},
	{"Migrate", func(ctx context.Context, s *Store) error { return s.Migrate(ctx) }},
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	for _, how := range []struct {
		name  string
		close func(s *Store) error
	}{
		{"Close", func(s *Store) error { return s.Close() }},
		{"DB().Close", func(s *Store) error { return s.DB().Close() }},
	} {
		t.Run(how.name, func(t *testing.T) {
			forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
				if err := how.close(s); err != nil {
					t.Fatal(err)
				}
				for _, c := range calls {
					err := c.call(testCtx(t), s)
					if !errors.Is(err, quota.ErrUnavailable) {
						t.Errorf("%s: err = %v; want ErrUnavailable", c.name, err)
					}
				}
			})
		})
	}
}

func TestOpenClosedPortIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()

	start := time.Now()
	s, err := Open(testCtx(t), "root@tcp("+addr+")/qc", Options{QueryTimeout: time.Second})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open succeeded on a closed port")
	}
	if !errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("err = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v; want it bounded by the query timeout", d)
	}
}

func TestOpenBadDSN(t *testing.T) {
	_, err := Open(testCtx(t), "not a dsn", Options{})
	if err == nil || errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("err = %v; want a DSN error", err)
	}
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		name        string
		err         error
		unavailable bool
		duplicate   bool
	}{
		{"mysql duplicate", &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false, true},
		{"mysql syntax", &mysql.MySQLError{Number: 1064}, false, false},
		{"mysql too many connections", &mysql.MySQLError{Number: 1040}, true, false},
		{"mysql shutdown", &mysql.MySQLError{Number: 1053}, true, false},
		{"mysql server gone", fmt.Errorf("exec: %w", &mysql.MySQLError{Number: 2006}), true, false},
		{"mysql lost", &mysql.MySQLError{Number: 2013}, true, false},
		{"bad conn", driver.ErrBadConn, true, false},
		{"invalid conn", fmt.Errorf("x: %w", mysql.ErrInvalidConn), true, false},
		{"deadline", context.DeadlineExceeded, true, false},
		{"cancelled", context.Canceled, false, false},
		{"net op error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("boom")}, true, false},
		{"refused text", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true, false},
		{"db closed", errors.New("sql: database is closed"), true, false},
		{"store closed", errClosed, true, false},
		{"other", errors.New("boom"), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := isUnavailable(tc.err); got != tc.unavailable {
				t.Errorf("isUnavailable = %v; want %v", got, tc.unavailable)
			}
			if got := isDuplicateKey(tc.err); got != tc.duplicate {
				t.Errorf("isDuplicateKey = %v; want %v", got, tc.duplicate)
			}
			wrapped := translate("op", tc.err)
			if !errors.Is(wrapped, tc.err) {
				t.Errorf("translate lost the original: %v", wrapped)
			}
			if errors.Is(wrapped, quota.ErrUnavailable) != tc.unavailable {
				t.Errorf("translate = %v; ErrUnavailable want %v", wrapped, tc.unavailable)
			}
			ins := insertError("sid", tc.err)
			if errors.Is(ins, quota.ErrDuplicateSession) != tc.duplicate || !errors.Is(ins, tc.err) {
				t.Errorf("insertError = %v; ErrDuplicateSession want %v", ins, tc.duplicate)
			}
		})
	}
}

// TestSQLiteDuplicateCode checks the real driver error, not a synthetic one.
func TestSQLiteDuplicateCode(t *testing.T) {
	s := mustSQLite(t, ":memory:", Options{})
	mustInsert(t, s, usingRec("x", 1))
	err := s.insertRows(testCtx(t), []quota.UsageRecord{usingRec("x", 1)})
	var se *sqlite.Error
	if !errors.As(err, &se) || !isDuplicateKey(err) || isUnavailable(err) {
		t.Fatalf("err = %v (%T); want a sqlite UNIQUE constraint error", err, err)
	}
}

func TestOpenSQLiteSettings(t *testing.T) {
	cases := []struct {
		name        string
		path        func(t *testing.T) string
		journal     string
		maxOpen     int
		busyTimeout int
	}{
		{"memory", func(*testing.T) string { return ":memory:" }, "memory", 1, sqliteBusyTimeoutMs},
		{"file", func(t *testing.T) string { return t.TempDir() + "/qc.db" }, "wal", 1, sqliteBusyTimeoutMs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustSQLite(t, tc.path(t), Options{MaxOpenConns: 7})
			ctx := testCtx(t)
			var journal string
			var busy int
			if err := s.DB().GetContext(ctx, &journal, "PRAGMA journal_mode"); err != nil {
				t.Fatal(err)
			}
			if err := s.DB().GetContext(ctx, &busy, "PRAGMA busy_timeout"); err != nil {
				t.Fatal(err)
			}
			if journal != tc.journal || busy != tc.busyTimeout {
				t.Fatalf("journal_mode %q, busy_timeout %d; want %q, %d", journal, busy, tc.journal, tc.busyTimeout)
			}
			if got := s.DB().Stats().MaxOpenConnections; got != tc.maxOpen {
				t.Fatalf("MaxOpenConnections = %d; want %d", got, tc.maxOpen)
			}
		})
	}
}

// TestATransactionEndedByItsTimeoutIsUnavailable: once the statement timeout
// ends a group's transaction, database/sql answers ErrTxDone to what follows;
// that is a database that did not answer in time (503), not a bug (500).
func TestATransactionEndedByItsTimeoutIsUnavailable(t *testing.T) {
	ended, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ended.Done()
	err := translate("insert", timedOut(ended, fmt.Errorf("exec: %w", sql.ErrTxDone)))
	if !errors.Is(err, quota.ErrUnavailable) || !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("err = %v; want ErrUnavailable wrapping ErrTxDone", err)
	}
	live := context.Background()
	if err := translate("insert", timedOut(live, sql.ErrTxDone)); errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("ErrTxDone with a live context = %v; want it left as it is", err)
	}
	if timedOut(ended, nil) != nil {
		t.Fatal("a nil error must stay nil")
	}
}
