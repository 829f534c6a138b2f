package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the dev-mode ledger, opened read-side by tests

	"github.com/quotacenter/quota-center/internal/app"
)

// RedisAddr is QC_TEST_REDIS_ADDR or 127.0.0.1:6379.
func RedisAddr() string { return env("QC_TEST_REDIS_ADDR", "127.0.0.1:6379") }

// MySQLServerDSN is QC_TEST_MYSQL_DSN or root@tcp(127.0.0.1:3306)/.
func MySQLServerDSN() string { return env("QC_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/") }

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Required reports whether CI asked for real backends (no skipping).
func Required() bool { return os.Getenv("QC_TEST_REQUIRE_BACKENDS") == "1" }

// unreachable skips or fails the test for a missing backend.
func unreachable(tb testing.TB, what, addr, start string, err error) {
	tb.Helper()
	if Required() {
		tb.Fatalf("%s not reachable at %s (QC_TEST_REQUIRE_BACKENDS=1): %v", what, addr, err)
	}
	tb.Skipf("SKIP real-backend test: %s not reachable at %s (%v); start it with: %s", what, addr, err, start)
}

// MustRedis checks that the real Redis answers and returns its address.
func MustRedis(tb testing.TB) string {
	tb.Helper()
	addr := RedisAddr()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		unreachable(tb, "Redis", addr, `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no`, err)
	}
	_ = c.Close()
	return addr
}

// MustMySQL creates a fresh database on the real MariaDB/MySQL, drops it in
// tb.Cleanup, and returns a DSN for it.
func MustMySQL(tb testing.TB) string {
	tb.Helper()
	server := MySQLServerDSN()
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		tb.Fatalf("QC_TEST_MYSQL_DSN: %v", err)
	}
	db, err := sqlx.Open("mysql", server)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		unreachable(tb, "MySQL", cfg.Addr, "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd", err)
	}
	name := "qc_test_" + RandomSuffix()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("create database: %v", err)
	}
	tb.Cleanup(func() {
		_, _ = db.Exec("DROP DATABASE IF EXISTS " + name)
		_ = db.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// RandomSuffix returns 8 random lowercase hex characters.
func RandomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Resource returns a resource name unique to this test run, built from the
// test's name (valid for [a-z0-9_.-]{1,64}).
func Resource(tb testing.TB) string {
	n := strings.ToLower(tb.Name())
	var b strings.Builder
	for _, r := range n {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' || r == '.' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 50 {
		s = s[len(s)-50:]
	}
	name := s + "-" + RandomSuffix()
	tb.Cleanup(func() {
		dropRedisKeys(tb, name)
		dropClusterKeys(tb, name)
	})
	return name
}

// dropRedisKeys deletes a test resource's keys from the real Redis, if it
// answers, so that test runs do not pile keys up there. Failing to is
// logged, not a test failure: the names are unique per run.
func dropRedisKeys(tb testing.TB, resource string) {
	c, err := net.DialTimeout("tcp", RedisAddr(), 200*time.Millisecond)
	if err != nil {
		return // no real Redis: a dev-mode-only run
	}
	_ = c.Close()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, "qc:{"+resource+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Logf("cleanup of %s's Redis keys: %v", resource, err)
		return
	}
	if len(keys) > 0 {
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			tb.Logf("cleanup of %s's Redis keys: %v", resource, err)
		}
	}
}

// Mode says which backends a test server runs on.
type Mode string

// Modes: the embedded dev-mode backends, or the machine's real Redis and MySQL.
const (
	Dev  Mode = "dev"
	Real Mode = "real"
)

// Modes lists the backends a suite should run on: always dev, plus real and
// cluster (the real MySQL with the test Redis Cluster, see
// MustRedisCluster). Their subtests skip (or fail in CI) when the servers
// are unreachable.
func Modes() []Mode { return []Mode{Dev, Real, Cluster} }

// Server is a running quota-center.
type Server struct {
	URL    string   // http://127.0.0.1:port
	Ledger *sqlx.DB // read access to the ledger it writes
	Mode   Mode
	// AdminToken is the bearer token of /admin/* ("" when admin is open, as
	// in dev mode). Send it as "Authorization: Bearer <AdminToken>".
	AdminToken string
}

// AdminTokenName is the name (the audit actor) of Server.AdminToken.
const AdminTokenName = "testenv"

// Start runs app.Serve on 127.0.0.1:0 with the given mode and extra flags,
// and stops it in tb.Cleanup (asserting a clean stop). In Real mode, which
// is production mode, it configures an admin token (Server.AdminToken,
// named AdminTokenName) unless extra has --admin-tokens; dev mode leaves
// admin open. Extra flags come last and win.
//
// The server's log (warn and above unless extra sets --log-level) is kept
// and shown with the test's output when the test fails, the last 16 KiB of
// it: a 500 or a 503 the test did not expect is explained there.
func Start(tb testing.TB, mode Mode, extra ...string) *Server {
	tb.Helper()
	logs := &tailBuffer{}
	s := StartLogged(tb, mode, logs, extra...)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("log of the server on %s:\n%s", s.URL, logs.tail(16<<10))
		}
	})
	return s
}

// tailBuffer collects a server's log; the server writes from many
// goroutines.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 1<<20 { // keep the last MiB
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-(512<<10):]...)
	}
	return len(p), nil
}

// tail answers the last n bytes written.
func (b *tailBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) <= n {
		return string(b.buf)
	}
	return "…" + string(b.buf[len(b.buf)-n:])
}

// StartLogged is Start with the server's log written to logOut, which must
// be safe for concurrent writes.
func StartLogged(tb testing.TB, mode Mode, logOut io.Writer, extra ...string) *Server {
	tb.Helper()
	args := []string{"--http-addr", "127.0.0.1:0", "--log-level", "warn", "--sweep-interval", "100ms"}
	var ledger *sqlx.DB
	var err error
	var adminToken string
	switch mode {
	case Real, Cluster:
		dsn := MustMySQL(tb)
		args = append(args, RedisArgs(tb, mode)...)
		args = append(args, "--mysql-dsn", dsn, "--migrate-on-start")
		if !hasFlag(extra, "admin-tokens") {
			adminToken = "testenv-admin-" + RandomSuffix() + RandomSuffix()
			args = append(args, "--admin-tokens", AdminTokenName+":"+adminToken)
		}
		if !hasFlag(extra, "api-keys") && !hasFlag(extra, "insecure-open-quota") {
			// Production refuses open client endpoints unless told.
			args = append(args, "--insecure-open-quota")
		}
		ledger, err = sqlx.Open("mysql", dsn)
	default:
		path := filepath.Join(tb.TempDir(), "ledger.db")
		args = append(args, "--dev-sqlite-path", path)
		ledger, err = sqlx.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&mode=ro")
	}
	if err != nil {
		tb.Fatalf("open ledger: %v", err)
	}
	tb.Cleanup(func() { _ = ledger.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, append(args, extra...), logOut, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		tb.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("serve stopped with error: %v", err)
			}
		})
		return &Server{URL: "http://" + a, Ledger: ledger, Mode: mode, AdminToken: adminToken}
	case err := <-done:
		cancel()
		tb.Fatalf("serve did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		tb.Fatalf("serve did not start within 30s")
	}
	return nil
}

// hasFlag reports whether args set the flag name (-name, --name, with or
// without =value).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// Eventually polls cond every 20ms until it is true or the deadline passes.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
