package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Bounds of the MariaDB waits. The machine may be loaded (other test
// packages run in parallel), so they are generous; they are still bounds.
const (
	MariaDBInstallTimeout = 3 * time.Minute
	MariaDBStartTimeout   = 90 * time.Second
	MariaDBStopTimeout    = 60 * time.Second
)

// MariaDB is a private mariadbd on a free loopback port, with a datadir of
// its own and root@127.0.0.1 without a password.
type MariaDB struct {
	server
	bin     string
	dir     string // the caller's directory: datadir, logs
	sockDir string // short private directory for the socket (path length limit)
	port    int
	logf    Logf
}

// StartMariaDB starts a private MariaDB with its datadir in dir (created if
// needed; the caller removes it). Errors wrap ErrMissingBinary when mariadbd
// or mariadb-install-db is not installed.
func StartMariaDB(ctx context.Context, dir string, logf Logf) (*MariaDB, error) {
	bin, err := lookBinary("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmpl, err := datadirTemplate(ctx, bin, logf)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	out, err := exec.CommandContext(cctx, "cp", "-a", "--sparse=always", tmpl, data).CombinedOutput()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("copy mariadb datadir template: %w: %s", err, out)
	}
	sockDir, err := os.MkdirTemp("", "qcf-sock-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(sockDir)
		return nil, err
	}
	m := &MariaDB{bin: bin, dir: dir, sockDir: sockDir, port: port, logf: logf}
	if err := m.Start(ctx); err != nil {
		_ = os.RemoveAll(sockDir)
		return nil, err
	}
	return m, nil
}

// datadirTemplate returns a datadir initialised by mariadb-install-db for
// this mariadbd version, making it once (it takes seconds) in os.TempDir().
// Concurrent callers each install into a private directory and rename it
// into place; the loser removes its copy.
func datadirTemplate(ctx context.Context, mariadbd string, logf Logf) (string, error) {
	install, err := lookBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return "", err
	}
	ver, err := exec.CommandContext(ctx, mariadbd, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", mariadbd, err)
	}
	h := fnv.New64a()
	_, _ = h.Write(ver)
	_, _ = fmt.Fprintf(h, "|uid=%d|v1", os.Geteuid())
	root := filepath.Join(os.TempDir(), fmt.Sprintf("qc-faults-mariadb-%x", h.Sum64()))
	data := filepath.Join(root, "data")
	if _, err := os.Stat(filepath.Join(root, "ok")); err == nil {
		return data, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "qc-faults-mariadb-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // after a successful rename, tmp no longer exists
	logf.printf("faults: initialising a MariaDB datadir template with %s (once per version)", install)
	args := []string{
		"--no-defaults", "--datadir=" + filepath.Join(tmp, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
	}
	if u, err := user.Current(); err == nil && os.Geteuid() == 0 {
		args = append(args, "--user="+u.Username) // mariadbd refuses root without --user
	}
	ictx, cancel := context.WithTimeout(ctx, MariaDBInstallTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ictx, install, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", install, err, tailString(string(out), 1500))
	}
	if err := os.WriteFile(filepath.Join(tmp, "ok"), ver, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, root); err != nil {
		if _, serr := os.Stat(filepath.Join(root, "ok")); serr == nil {
			return data, nil // another process made it first
		}
		return "", fmt.Errorf("install datadir template: %w", err)
	}
	return data, nil
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Addr is host:port of the server (the same across restarts).
func (m *MariaDB) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// LogPath is the server's error log.
func (m *MariaDB) LogPath() string { return filepath.Join(m.dir, "error.log") }

// DSN is a go-sql-driver DSN for database db ("" = none) as root.
func (m *MariaDB) DSN(db string) string { return m.DSNAt(m.Addr(), db) }

// DSNAt is DSN through another address (a Proxy in front of the server).
func (m *MariaDB) DSNAt(addr, db string) string {
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "tcp"
	c.Addr = addr
	c.DBName = db
	c.Timeout = 2 * time.Second
	return c.FormatDSN()
}

func (m *MariaDB) open(db string) (*sql.DB, error) {
	d, err := sql.Open("mysql", m.DSN(db))
	if err != nil {
		return nil, err
	}
	d.SetMaxOpenConns(2)
	return d, nil
}

// Start starts the server (again) and waits until root can log in over TCP.
func (m *MariaDB) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.proc != nil && !m.proc.exited() {
		m.mu.Unlock()
		return errors.New("mariadb: already running")
	}
	args := []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(m.dir, "data"),
		"--socket=" + filepath.Join(m.sockDir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.dir, "mysqld.pid"),
		"--log-error=" + m.LogPath(),
		"--port=" + strconv.Itoa(m.port), "--bind-address=127.0.0.1",
		"--skip-name-resolve", "--skip-log-bin", "--max-connections=300",
		"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2",
	}
	if u, err := user.Current(); err == nil && os.Geteuid() == 0 {
		args = append(args, "--user="+u.Username)
	}
	p, err := startProcess(m.bin, args, filepath.Join(m.dir, "mysqld.out"))
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.proc = p
	m.mu.Unlock()
	db, err := m.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	err = waitUntil(ctx, MariaDBStartTimeout, "mariadb "+m.Addr(), p.exitErr, func(ctx context.Context) error {
		return db.PingContext(ctx)
	})
	if err != nil {
		_ = p.stop(syscall.SIGKILL, 10*time.Second)
		return fmt.Errorf("%w; log: %s", err, tail(m.LogPath(), 1500))
	}
	m.logf.printf("faults: mariadb up on %s (pid %d)", m.Addr(), p.cmd.Process.Pid)
	return nil
}

// Stop shuts the server down gracefully (SIGTERM) and waits for it; after
// MariaDBStopTimeout it is killed.
func (m *MariaDB) Stop() error {
	p := m.current()
	if p == nil {
		return nil
	}
	err := p.stop(syscall.SIGTERM, MariaDBStopTimeout)
	m.logf.printf("faults: mariadb %s stopped", m.Addr())
	return err
}

// Kill kills the server with SIGKILL (InnoDB recovers at the next start).
func (m *MariaDB) Kill() error {
	p := m.current()
	if p == nil {
		return nil
	}
	err := p.stop(syscall.SIGKILL, 10*time.Second)
	m.logf.printf("faults: mariadb %s killed", m.Addr())
	return err
}

// Restart stops the server, waits down, and starts it again.
func (m *MariaDB) Restart(ctx context.Context, down time.Duration) error {
	if err := m.Stop(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return m.Start(ctx)
}

// CreateDatabase creates database name.
func (m *MariaDB) CreateDatabase(ctx context.Context, name string) error {
	db, err := m.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"`")
	return err
}

// KillConnections KILLs every connection whose current database is db
// (the service's pool), except the one asking, and returns how many.
func (m *MariaDB) KillConnections(ctx context.Context, db string) (int, error) {
	admin, err := m.open("")
	if err != nil {
		return 0, err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := admin.Conn(ctx) // one connection: CONNECTION_ID() is ours
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx,
		"SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", db)
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		_, err := conn.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1094 { // unknown thread: it ended meanwhile
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Close kills the server and removes its socket directory. The data
// directory is the caller's.
func (m *MariaDB) Close() error {
	var err error
	if p := m.current(); p != nil {
		err = p.stop(syscall.SIGKILL, 10*time.Second)
	}
	_ = os.RemoveAll(m.sockDir)
	return err
}
