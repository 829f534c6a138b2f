package mysqlstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// mixedGroup runs InsertSession for every record of ins and FinishSession
// for every record of fins at once and returns their errors in order.
func mixedGroup(t *testing.T, s *Store, ins, fins []quota.UsageRecord) (insErrs, finErrs []error) {
	t.Helper()
	insErrs, finErrs = make([]error, len(ins)), make([]error, len(fins))
	var wg sync.WaitGroup
	for i := range ins {
		wg.Go(func() { insErrs[i] = s.InsertSession(testCtx(t), ins[i]) })
	}
	for i := range fins {
		wg.Go(func() { finErrs[i] = s.FinishSession(testCtx(t), fins[i]) })
	}
	wg.Wait()
	return insErrs, finErrs
}

// mixedRecs returns n new USING rows ("<prefix>-new-i"), n committed USING
// rows ("<prefix>-old-i", inserted now) and the finishes of the committed
// ones.
func mixedRecs(t *testing.T, s *Store, prefix string, n int) (ins, old, fins []quota.UsageRecord) {
	t.Helper()
	for i := range n {
		ins = append(ins, usingRec(fmt.Sprintf("%s-new-%d", prefix, i), 10))
		old = append(old, usingRec(fmt.Sprintf("%s-old-%d", prefix, i), 10))
		fins = append(fins, finishRec(old[i].SessionID, int64(i), 10-int64(i), 0, period.Add(time.Hour)))
	}
	if err := s.insertRows(testCtx(t), old); err != nil { // straight to the table, not waiting out BatchMaxWait
		t.Fatal(err)
	}
	return ins, old, fins
}

// TestSessionGroupIsOneTransaction: a full group of inserts and finishes
// (the group is sent only because it is full) is one INSERT and one finish
// UPDATE, and on MariaDB both ran in the same InnoDB transaction (a trigger
// records the transaction id of every row written); every row is right.
func TestSessionGroupIsOneTransaction(t *testing.T) {
	const n = 4
	var mu sync.Mutex
	var statements []string
	opts := Options{BatchMaxRows: 2 * n, BatchMaxWait: time.Minute, OnGroupCommit: func(op string, rows int) {
		mu.Lock()
		defer mu.Unlock()
		statements = append(statements, fmt.Sprintf("%s:%d", op, rows))
	}}
	forEachBackend(t, opts, func(t *testing.T, s *Store) {
		ins, old, fins := mixedRecs(t, s, "tx", n)
		mysql := s.dialect.name == dialectMySQL.name
		if mysql {
			for _, ddl := range []string{
				`CREATE TABLE trx_probe (session_id VARCHAR(260) NOT NULL, trx_id BIGINT NOT NULL)`,
				`CREATE TRIGGER probe_insert AFTER INSERT ON quota_usage FOR EACH ROW INSERT INTO trx_probe
					SELECT NEW.session_id, trx_id FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()`,
				`CREATE TRIGGER probe_update AFTER UPDATE ON quota_usage FOR EACH ROW INSERT INTO trx_probe
					SELECT NEW.session_id, trx_id FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()`,
			} {
				if _, err := s.DB().ExecContext(testCtx(t), ddl); err != nil {
					t.Fatalf("%s: %v", ddl, err)
				}
			}
		}
		mu.Lock()
		statements = nil
		mu.Unlock()
		insErrs, finErrs := mixedGroup(t, s, ins, fins)
		for i := range n {
			if insErrs[i] != nil || finErrs[i] != nil {
				t.Fatalf("row %d: insert %v, finish %v", i, insErrs[i], finErrs[i])
			}
			if got := mustSession(t, s, ins[i].SessionID); got != ins[i] {
				t.Fatalf("new %d = %+v; want %+v", i, got, ins[i])
			}
			if got, want := mustSession(t, s, old[i].SessionID), settled(old[i].SessionID, 10, fins[i], false); got != want {
				t.Fatalf("old %d =\n %+v\nwant\n %+v", i, got, want)
			}
		}
		mu.Lock()
		got := slices.Clone(statements)
		mu.Unlock()
		if want := []string{fmt.Sprintf("insert:%d", n), fmt.Sprintf("finish:%d", n)}; !slices.Equal(got, want) {
			t.Fatalf("group-commit statements %v, want %v", got, want)
		}
		if !mysql {
			return
		}
		var probes []struct {
			SessionID string `db:"session_id"`
			TrxID     int64  `db:"trx_id"`
		}
		if err := s.DB().SelectContext(testCtx(t), &probes, `SELECT session_id, trx_id FROM trx_probe`); err != nil {
			t.Fatal(err)
		}
		trx := map[int64]int{}
		for _, p := range probes {
			trx[p.TrxID]++
		}
		if len(probes) != 2*n || len(trx) != 1 {
			t.Fatalf("rows written by transaction: %v (%d rows); want all %d in one", trx, len(probes), 2*n)
		}
	})
}

// TestSessionGroupDuplicateInsert: a group of inserts and finishes in which
// one insert repeats a committed session id. The transaction is rolled
// back, and each kind is written on its own: the duplicate fails its own
// caller only, the other inserts and every finish land.
func TestSessionGroupDuplicateInsert(t *testing.T) {
	const n = 4
	forEachBackend(t, Options{BatchMaxRows: 2 * n, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		ins, old, fins := mixedRecs(t, s, "dup", n)
		dup := usingRec(old[0].SessionID, 99)
		ins[2] = dup
		insErrs, finErrs := mixedGroup(t, s, ins, fins)
		if !errors.Is(insErrs[2], quota.ErrDuplicateSession) {
			t.Fatalf("duplicate insert: err = %v; want ErrDuplicateSession", insErrs[2])
		}
		for i := range n {
			if finErrs[i] != nil {
				t.Fatalf("finish %d: %v", i, finErrs[i])
			}
			if got, want := mustSession(t, s, old[i].SessionID), settled(old[i].SessionID, 10, fins[i], false); got != want {
				t.Fatalf("old %d =\n %+v\nwant\n %+v", i, got, want)
			}
			if i == 2 {
				continue
			}
			if insErrs[i] != nil {
				t.Fatalf("insert %d: %v", i, insErrs[i])
			}
			if got := mustSession(t, s, ins[i].SessionID); got != ins[i] {
				t.Fatalf("new %d = %+v; want %+v", i, got, ins[i])
			}
		}
		if got := countRows(t, s); got != 2*n-1 {
			t.Fatalf("%d rows; want %d", got, 2*n-1)
		}
	})
}

// TestSessionGroupPoisonedFinish: a group of inserts and finishes in which
// the database rejects one finish's row. The transaction is rolled back and
// each kind is written on its own: every insert lands, the other finishes
// settle, and only the poisoned finish's caller fails, its row untouched.
func TestSessionGroupPoisonedFinish(t *testing.T) {
	const n, poison = 4, 4343
	forEachBackend(t, Options{BatchMaxRows: 2 * n, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		ins, old, fins := mixedRecs(t, s, "poison", n)
		fins[1].ChargedAmount = poison
		poisonCharged(t, s, poison)
		insErrs, finErrs := mixedGroup(t, s, ins, fins)
		for i := range n {
			if insErrs[i] != nil {
				t.Fatalf("insert %d: %v", i, insErrs[i])
			}
			if got := mustSession(t, s, ins[i].SessionID); got != ins[i] {
				t.Fatalf("new %d = %+v; want %+v", i, got, ins[i])
			}
			want := settled(old[i].SessionID, 10, fins[i], false)
			if i == 1 {
				if finErrs[i] == nil || errors.Is(finErrs[i], quota.ErrUnavailable) {
					t.Fatalf("poisoned finish: err = %v; want a non-unavailable error", finErrs[i])
				}
				want = old[i]
			} else if finErrs[i] != nil {
				t.Fatalf("finish %d: %v", i, finErrs[i])
			}
			if got := mustSession(t, s, old[i].SessionID); got != want {
				t.Fatalf("old %d =\n %+v\nwant\n %+v", i, got, want)
			}
		}
	})
}

// TestSessionGroupUnavailable: with the pool closed under a full group of
// inserts and finishes, every caller gets ErrUnavailable.
func TestSessionGroupUnavailable(t *testing.T) {
	const n = 3
	forEachBackend(t, Options{BatchMaxRows: 2 * n, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		ins, _, fins := mixedRecs(t, s, "down", n)
		if err := s.DB().Close(); err != nil {
			t.Fatal(err)
		}
		insErrs, finErrs := mixedGroup(t, s, ins, fins)
		for i, err := range append(insErrs, finErrs...) {
			if !errors.Is(err, quota.ErrUnavailable) {
				t.Fatalf("call %d: err = %v; want ErrUnavailable", i, err)
			}
		}
	})
}
