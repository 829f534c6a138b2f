package migrations_test

import (
	"context"
	"database/sql"
	"embed"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite"

	"github.com/quotacenter/quota-center/migrations"
)

func files(t *testing.T, fsys embed.FS, dir string) []string {
	t.Helper()
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = strings.TrimPrefix(n, dir+"/")
	}
	return names
}

func TestDialectsHaveTheSameVersions(t *testing.T) {
	my, lite := files(t, migrations.MySQL, "mysql"), files(t, migrations.SQLite, "sqlite")
	if len(my) == 0 || !slices.Equal(my, lite) {
		t.Fatalf("mysql %v, sqlite %v; want the same non-empty list", my, lite)
	}
}

func TestFilesHaveUpAndDown(t *testing.T) {
	for _, c := range []struct {
		fsys embed.FS
		dir  string
	}{{migrations.MySQL, "mysql"}, {migrations.SQLite, "sqlite"}} {
		for _, name := range files(t, c.fsys, c.dir) {
			b, err := c.fsys.ReadFile(c.dir + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			up := strings.Index(string(b), "-- +goose Up")
			down := strings.Index(string(b), "-- +goose Down")
			if up < 0 || down < up {
				t.Errorf("%s/%s: want -- +goose Up then -- +goose Down", c.dir, name)
			}
		}
	}
}

// memorySQLite opens an in-memory SQLite database (closed when the test
// ends) and returns it with the SQLite migrations at their root.
func memorySQLite(t *testing.T) (*sql.DB, fs.FS) {
	t.Helper()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	sub, err := fs.Sub(migrations.SQLite, "sqlite")
	if err != nil {
		t.Fatal(err)
	}
	return db, sub
}

// TestSQLiteUpDownUp applies, reverts and re-applies every SQLite migration.
func TestSQLiteUpDownUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, sub := memorySQLite(t)
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	tables := func() []string {
		var names []string
		rows, err := db.QueryContext(ctx,
			"SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'quota_%' ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return names
	}
	want := []string{"quota_audit", "quota_grant", "quota_line", "quota_policy", "quota_pool_event", "quota_pool_settings", "quota_reclaim", "quota_usage", "quota_usage_lifecycle", "quota_usage_rollup", "quota_usage_rollup_deferred"}
	for step, run := range []func() error{
		func() error { _, err := p.Up(ctx); return err },
		func() error { _, err := p.DownTo(ctx, 0); return err },
		func() error { _, err := p.Up(ctx); return err },
	} {
		if err := run(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		got := tables()
		if step == 1 {
			if len(got) != 0 {
				t.Fatalf("after down: tables %v remain", got)
			}
			continue
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: tables %v; want %v", step, got, want)
		}
	}
}

// TestSQLiteDownOf00012SumsTheListedRows: a version without
// quota_usage_rollup_deferred reads every row below the watermark through
// the rollups, so going down sums the rows kept raw there (as they are).
func TestSQLiteDownOf00012SumsTheListedRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, sub := memorySQLite(t)
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 12); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO quota_usage (id, resource_name, client_id, session_id, period_start_ms, granted_amount,
			charged_amount, start_ms, end_ms, status) VALUES
			(1, 'r', 'a', 's1', 0, 7, 7, 3600000, 3700000, 'LEAKED'),
			(2, 'r', 'a', 's2', 0, 5, 0, 7200000, 7300000, 'CANCELLED'),
			(3, 'r', 'a', 's3', 86400000, 9, 9, 90000000, NULL, 'USING')`,
		`INSERT INTO quota_usage_lifecycle (resource_name, rolled_to_ms) VALUES ('r', 86400000)`,
		`INSERT INTO quota_usage_rollup_deferred (resource_name, start_ms, period_start_ms, id) VALUES
			('r', 3600000, 0, 1), ('r', 7200000, 0, 2)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.DownTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	var sessions, leaked, granted, charged int64
	if err := db.QueryRowContext(ctx, `SELECT SUM(sessions), SUM(leaked), SUM(granted), SUM(charged)
		FROM quota_usage_rollup WHERE resource_name = 'r'`).Scan(&sessions, &leaked, &granted, &charged); err != nil {
		t.Fatal(err)
	}
	if sessions != 2 || leaked != 1 || granted != 12 || charged != 7 {
		t.Fatalf("rollups after down: %d sessions, %d leaked, granted %d, charged %d; want 2, 1, 12, 7",
			sessions, leaked, granted, charged)
	}
}
