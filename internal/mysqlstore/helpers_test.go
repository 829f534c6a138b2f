package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const defaultTestMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// MustMySQL returns a migrated Store on a fresh database qc_test_xxxxxxxx of
// the server at QC_TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/); the
// database is dropped when the test ends. It skips the test when the server
// is unreachable, or fails it when QC_TEST_REQUIRE_BACKENDS=1.
func MustMySQL(tb testing.TB) *Store {
	tb.Helper()
	return mustMySQLWith(tb, Options{})
}

func mustMySQLWith(tb testing.TB, opts Options) *Store {
	tb.Helper()
	s, _ := freshMySQL(tb, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

// freshMySQL opens a Store on a fresh, empty (not migrated) database, as
// MustMySQL does, and returns its DSN too.
func freshMySQL(tb testing.TB, opts Options) (*Store, string) {
	tb.Helper()
	dsn := os.Getenv("QC_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = defaultTestMySQLDSN
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatalf("QC_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatalf("open mysql: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		const hint = "MySQL not reachable at %s (%v): start it with " +
			"`start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd` or set QC_TEST_MYSQL_DSN"
		if os.Getenv("QC_TEST_REQUIRE_BACKENDS") == "1" {
			tb.Fatalf(hint, cfg.Addr, err)
		}
		tb.Skipf(hint, cfg.Addr, err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "qc_test_" + hex.EncodeToString(suffix)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		_ = admin.Close()
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
		_ = admin.Close()
	})

	cfg.DBName = name
	s, err := Open(ctx, cfg.FormatDSN(), opts)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() }) // runs before the drop (LIFO)
	return s, cfg.FormatDSN()
}

// mustSQLite returns a migrated SQLite Store at path (":memory:" or a file),
// closed when the test ends.
func mustSQLite(tb testing.TB, path string, opts Options) *Store {
	tb.Helper()
	// A deadline, not a timing claim: the ten migrations under -race on
	// the loaded shared 2-core machine (load 37) took over 5 s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := OpenSQLite(ctx, path, opts)
	if err != nil {
		tb.Fatalf("open sqlite: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

// backend opens a fresh, migrated, empty Store.
type backend struct {
	name string
	open func(tb testing.TB, opts Options) *Store
}

var backends = []backend{
	{"mysql", mustMySQLWith},
	{"sqlite-memory", func(tb testing.TB, opts Options) *Store { return mustSQLite(tb, ":memory:", opts) }},
	{"sqlite-file", func(tb testing.TB, opts Options) *Store {
		return mustSQLite(tb, filepath.Join(tb.TempDir(), "qc.db"), opts)
	}},
}

// forEachBackend runs fn as a subtest on every backend, each with its own
// fresh store.
func forEachBackend(t *testing.T, opts Options, fn func(t *testing.T, s *Store)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			fn(t, b.open(t, opts))
		})
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
