package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// ledgerRow is the part of a quota_usage row the ledger mode's tests check.
type ledgerRow struct {
	resource, client, status               string
	apply, min, granted, charged, refunded int64
	startMs, periodStartMs                 int64
	ended                                  bool
}

// readRow reads session id's ledger row on db (a pool of its own, not the
// server's); ok is false when there is none.
func readRow(t *testing.T, db *sql.DB, id string) (ledgerRow, bool) {
	t.Helper()
	var r ledgerRow
	var end sql.NullInt64
	err := db.QueryRow(`SELECT resource_name, client_id, status, apply_amount, min_amount, granted_amount,
		charged_amount, refunded_amount, start_ms, period_start_ms, end_ms FROM quota_usage WHERE session_id = ?`, id).
		Scan(&r.resource, &r.client, &r.status, &r.apply, &r.min, &r.granted, &r.charged, &r.refunded,
			&r.startMs, &r.periodStartMs, &end)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false
	}
	if err != nil {
		t.Fatalf("read the row of %s: %v", id, err)
	}
	r.ended = end.Valid
	return r, true
}

// TestLedgerModeAnswersOnlyWithTheRowCommitted runs the ledger mode
// (--mysql-dsn) on the machine's Redis and MariaDB, in a database of the
// test's own: every 200 of an apply or a finish is followed by a read of the
// session's row on another connection, which must show it; when the row
// cannot be written (the table renamed away), the answer is 503, a fresh
// grant is given back, and a retried finish settles the row.
func TestLedgerModeAnswersOnlyWithTheRowCommitted(t *testing.T) {
	redisAddr := testenv.MustRedis(t)
	dsn := testenv.MustMySQL(t)
	res := "floor-test-" + testenv.RandomSuffix()
	base := start(t, redisAddr, res, "--limit", "1000", "--mysql-dsn", dsn)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	// One at a time, with the client's ids and with a server-made one.
	code, a := post(t, base+"/quota/apply", map[string]any{"applyAmount": 60, "minAmount": 5, "clientId": "c-1", "sessionId": "s-1"})
	if code != http.StatusOK || a["grantedAmount"] != float64(60) || a["remainingQuota"] != float64(940) {
		t.Fatalf("apply: %d %v", code, a)
	}
	row, ok := readRow(t, db, "s-1")
	if !ok || row.resource != res || row.client != "c-1" || row.status != "USING" || row.apply != 60 || row.min != 5 ||
		row.granted != 60 || row.charged != 60 || row.startMs == 0 || row.periodStartMs == 0 || row.ended {
		t.Fatalf("row of s-1 after its 200: %v %+v", ok, row)
	}
	code, a = post(t, base+"/quota/apply", map[string]any{"applyAmount": 1})
	id, _ := a["sessionId"].(string)
	if code != http.StatusOK || id == "" {
		t.Fatalf("apply without a session id: %d %v", code, a)
	}
	if row, ok := readRow(t, db, id); !ok || row.status != "USING" || row.granted != 1 {
		t.Fatalf("row of the server-made %s after its 200: %v %+v", id, ok, row)
	}

	// Concurrent applies share group-commit statements; each 200 still
	// means its own row is there.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("c-%d", i)
			code, a := post(t, base+"/quota/apply", map[string]any{"applyAmount": 2, "sessionId": sid})
			if code != http.StatusOK {
				errs <- fmt.Errorf("apply %s: %d %v", sid, code, a)
				return
			}
			if row, ok := readRow(t, db, sid); !ok || row.status != "USING" || row.granted != 2 {
				errs <- fmt.Errorf("row of %s after its 200: %v %+v", sid, ok, row)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	remaining := float64(1000 - 60 - 1 - 40)

	// A replay is answered from the row already there.
	if code, a := post(t, base+"/quota/apply", map[string]any{"applyAmount": 60, "minAmount": 5, "clientId": "c-1", "sessionId": "s-1"}); code != http.StatusOK {
		t.Fatalf("replay of s-1: %d %v", code, a)
	}

	code, f := post(t, base+"/quota/finish", map[string]any{"sessionId": "s-1", "actualUsedAmount": 10})
	if code != http.StatusOK || f["refundedAmount"] != float64(50) || f["remainingQuota"] != remaining+50 {
		t.Fatalf("finish: %d %v", code, f)
	}
	remaining += 50
	if row, ok := readRow(t, db, "s-1"); !ok || row.status != "FINISHED" || row.charged != 10 || row.refunded != 50 || !row.ended {
		t.Fatalf("row of s-1 after the finish's 200: %v %+v", ok, row)
	}

	// The ledger cannot be written: no 200, and the grant is given back.
	if _, err := db.Exec("RENAME TABLE quota_usage TO quota_usage_away"); err != nil {
		t.Fatal(err)
	}
	if code, a := post(t, base+"/quota/apply", map[string]any{"applyAmount": 7, "sessionId": "lost"}); code != http.StatusServiceUnavailable {
		t.Fatalf("apply with no ledger table: %d %v", code, a)
	}
	if code, f := post(t, base+"/quota/finish", map[string]any{"sessionId": "c-0", "actualUsedAmount": 2}); code != http.StatusServiceUnavailable {
		t.Fatalf("finish with no ledger table: %d %v", code, f)
	}
	if _, err := db.Exec("RENAME TABLE quota_usage_away TO quota_usage"); err != nil {
		t.Fatal(err)
	}
	if _, ok := readRow(t, db, "lost"); ok {
		t.Fatal("the refused apply's row is in the ledger")
	}
	if row, ok := readRow(t, db, "c-0"); !ok || row.status != "USING" {
		t.Fatalf("row of c-0 after the refused finish: %v %+v", ok, row)
	}
	code, a = post(t, base+"/quota/apply", map[string]any{"applyAmount": 3, "sessionId": "after"})
	if code != http.StatusOK || a["remainingQuota"] != remaining-3 {
		t.Fatalf("apply after the ledger is back (the refused grant of 7 given back: remaining %v): %d %v", remaining-3, code, a)
	}
	// The retried finish (a replay in Redis) settles the row.
	if code, f := post(t, base+"/quota/finish", map[string]any{"sessionId": "c-0", "actualUsedAmount": 2}); code != http.StatusOK {
		t.Fatalf("retried finish: %d %v", code, f)
	}
	if row, ok := readRow(t, db, "c-0"); !ok || row.status != "FINISHED" || row.charged != 2 || !row.ended {
		t.Fatalf("row of c-0 after the retried finish's 200: %v %+v", ok, row)
	}
}

// TestLedgerModeRefusesABadDSN: a DSN that does not parse, a server that
// does not answer and a database that does not exist each stop the baseline
// at start, before it listens, with an error naming --mysql-dsn and the
// cause.
func TestLedgerModeRefusesABadDSN(t *testing.T) {
	check := func(t *testing.T, dsn string, want ...string) error {
		t.Helper()
		err := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--mysql-dsn", dsn},
			func(string) { t.Error("it listened") })
		if err == nil {
			t.Fatalf("run with --mysql-dsn %q: no error", dsn)
		}
		for _, w := range append([]string{"--mysql-dsn: "}, want...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		return err
	}
	t.Run("malformed", func(t *testing.T) { _ = check(t, "no-such-dsn", "parse mysql dsn") })
	t.Run("unreachable", func(t *testing.T) {
		if err := check(t, "root@tcp(127.0.0.1:1)/qc", "connection refused"); !errors.Is(err, quota.ErrUnavailable) {
			t.Errorf("error %v does not wrap quota.ErrUnavailable", err)
		}
	})
	t.Run("unknown database", func(t *testing.T) {
		cfg, err := mysql.ParseDSN(testenv.MustMySQL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName += "_absent"
		_ = check(t, cfg.FormatDSN(), "Unknown database")
	})
}
