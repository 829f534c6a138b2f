package migrations_test

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/quotacenter/quota-center/internal/testenv"
	"github.com/quotacenter/quota-center/migrations"
)

// scopedVersion is the migration that widens session_id for scoped ids
// (issue 11 §3.5).
const scopedVersion = 7

// The longest scoped id: a 64-character resource, a 128-character client
// and a 64-character session id (quota.ScopedSessionID).
var longestScopedID = strings.Repeat("r", 64) + "/" + strings.Repeat("c", 128) + "/" + strings.Repeat("s", 64)

// checkScopedMigration takes a ledger to the version before scopedVersion,
// writes a row as the old version would, migrates up and checks that the
// row is kept as it was and that the longest scoped id fits; then down,
// which a stored scoped id must stop (MySQL) or survive (SQLite: TEXT).
func checkScopedMigration(t *testing.T, dialect goose.Dialect, db *sql.DB, fsys fs.FS, downRefused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := goose.NewProvider(dialect, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, scopedVersion-1); err != nil {
		t.Fatal(err)
	}
	insert := func(id, client string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO quota_usage (resource_name, client_id, session_id, period_start_ms,
			apply_amount, granted_amount, charged_amount, start_ms, status) VALUES ('r', ?, ?, 0, 5, 5, 5, 1, 'USING')`, client, id)
		return err
	}
	if err := insert("legacy-1", "client-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, scopedVersion); err != nil {
		t.Fatal(err)
	}
	var client string
	if err := db.QueryRowContext(ctx, "SELECT client_id FROM quota_usage WHERE session_id = 'legacy-1' AND status = 'USING'").Scan(&client); err != nil || client != "client-a" {
		t.Fatalf("the existing row after the migration: client %q, %v", client, err)
	}
	if err := insert(longestScopedID, strings.Repeat("c", 128)); err != nil {
		t.Fatalf("the longest scoped id: %v", err)
	}
	if err := insert("legacy-1", "client-b"); err == nil {
		t.Fatal("a second row of one stored id was written: the unique key is gone")
	}
	_, err = p.DownTo(ctx, scopedVersion-1)
	if downRefused != (err != nil) {
		t.Fatalf("down with a scoped id stored: %v (want refused: %v)", err, downRefused)
	}
	if downRefused {
		if _, err := db.ExecContext(ctx, "DELETE FROM quota_usage WHERE session_id = ?", longestScopedID); err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(ctx, scopedVersion-1); err != nil {
			t.Fatalf("down without scoped ids: %v", err)
		}
	}
}

func TestScopedSessionIDsKeepExistingRowsMySQL(t *testing.T) {
	db, err := sql.Open("mysql", testenv.MustMySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sub, err := fs.Sub(migrations.MySQL, "mysql")
	if err != nil {
		t.Fatal(err)
	}
	checkScopedMigration(t, goose.DialectMySQL, db, sub, true)
}

func TestScopedSessionIDsKeepExistingRowsSQLite(t *testing.T) {
	db, sub := memorySQLite(t)
	checkScopedMigration(t, goose.DialectSQLite3, db, sub, false)
}
