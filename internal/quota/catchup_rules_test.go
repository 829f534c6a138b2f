package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// snapStubs is the stubs' ledger able to read rows by id (SnapshotLedger).
type snapStubs struct {
	*stubs
	byID func(ids []string) (map[string]UsageRecord, error)
}

func (l snapStubs) SeedSnapshot(ctx context.Context, r string, start time.Time) (PeriodTotals, []UsageRecord, error) {
	return PeriodTotals{}, nil, nil
}

func (l snapStubs) SessionsByID(ctx context.Context, ids []string) (map[string]UsageRecord, error) {
	if err := l.enter(ctx, "SessionsByID"); err != nil {
		return nil, err
	}
	return l.byID(append([]string(nil), ids...))
}

type catchEnv struct {
	st     *stubs
	svc    *Service
	per    Period
	mu     sync.Mutex
	reads  [][]string // SessionsByID calls
	rows   map[string]UsageRecord
	fins   []FinishCmd
	caught []UsageRecord // CatchUp's open rows
}

func newCatchEnv(t *testing.T, opt Options) *catchEnv {
	t.Helper()
	e := &catchEnv{st: &stubs{}, per: Period{Start: testEpoch, End: testEpoch.Add(24 * time.Hour)}, rows: map[string]UsageRecord{}}
	e.st.restore = func(_ string, open []UsageRecord) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.caught = append(e.caught, open...)
		return nil
	}
	e.st.finish = func(c FinishCmd) (FinishResult, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.fins = append(e.fins, c)
		return FinishResult{}, nil
	}
	led := snapStubs{stubs: e.st, byID: func(ids []string) (map[string]UsageRecord, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.reads = append(e.reads, ids)
		out := map[string]UsageRecord{}
		for _, id := range ids {
			if r, ok := e.rows[id]; ok {
				out[id] = r
			}
		}
		return out, nil
	}}
	if opt.Now == nil {
		opt.Now = func() time.Time { return testEpoch.Add(time.Hour) }
	}
	e.svc = NewService(e.st, led, e.st, daySched{}, opt)
	return e
}

func row(id string, start time.Time) UsageRecord {
	return UsageRecord{ResourceName: "r", SessionID: id, PeriodStart: start, Status: StatusUsing, GrantedAmount: 5}
}

// The catch-up counts the rows of the period opened since the snapshot,
// pools' sessions' too (their reservation, keyed by the epoch they carry),
// reading every page of open rows (a full page means another), and leaves
// out other periods' rows.
func TestCatchUpCountsTheRowsOpenedSince(t *testing.T) {
	e := newCatchEnv(t, Options{})
	var afters []int64
	e.st.openPage = func(_ string, after int64, limit int) ([]UsageRecord, int64, error) {
		afters = append(afters, after)
		if after == 0 {
			page := make([]UsageRecord, limit)
			for i := range page {
				page[i] = row(fmt.Sprint("p", i), testEpoch)
			}
			page[0].BusinessLine = "bl"                          // a pool's
			page[1].PeriodStart = testEpoch.Add(-24 * time.Hour) // the previous period's
			return page, 7, nil
		}
		return []UsageRecord{row("last", testEpoch)}, 8, nil
	}
	if err := e.svc.catchUp(context.Background(), testPolicy, e.per, nil); err != nil {
		t.Fatal(err)
	}
	if len(afters) != 2 || afters[1] != 7 {
		t.Fatalf("pages read after %v, want 0 then 7", afters)
	}
	if len(e.caught) != seedPage || e.caught[0].SessionID != "p0" || e.caught[1].SessionID != "p2" || e.caught[len(e.caught)-1].SessionID != "last" {
		t.Fatalf("caught up %d rows (first %q), want %d: the pool's, not the old period's", len(e.caught), e.caught[0].SessionID, seedPage)
	}
	if e.st.n("TryLock") != 1 || e.st.n("Unlock") != 1 || e.st.n("SessionsByID") != 0 {
		t.Fatalf("locks %d/%d, reads %d", e.st.n("TryLock"), e.st.n("Unlock"), e.st.n("SessionsByID"))
	}
}

// Rows of the snapshot that are FINISHED since are finished in the store
// with their ledger charge; the rest (still USING, LEAKED, gone, pools',
// other periods') are left alone. Ids are read in chunks of seedPage.
func TestCatchUpFinishesTheRowsSettledSince(t *testing.T) {
	e := newCatchEnv(t, Options{FinishedRetention: 3 * time.Hour})
	var snap []UsageRecord
	for i := range seedPage {
		snap = append(snap, row(fmt.Sprint("s", i), testEpoch))
	}
	pool := row("pool", testEpoch)
	pool.BusinessLine = "bl"
	snap = append(snap, row("fin", testEpoch), row("leaked", testEpoch), row("gone", testEpoch), pool,
		row("old", testEpoch.Add(-24*time.Hour)))
	fin := row("fin", testEpoch)
	fin.Status, fin.ChargedAmount = StatusFinished, 3
	leaked := row("leaked", testEpoch)
	leaked.Status = StatusLeaked
	oldFin := fin
	oldFin.SessionID = "old"
	poolFin := fin
	poolFin.SessionID = "pool"
	e.rows = map[string]UsageRecord{"fin": fin, "leaked": leaked, "s0": row("s0", testEpoch), "old": oldFin, "pool": poolFin}
	if err := e.svc.catchUp(context.Background(), testPolicy, e.per, snap); err != nil {
		t.Fatal(err)
	}
	if len(e.reads) != 2 || len(e.reads[0]) != seedPage || len(e.reads[1]) != 3 || e.reads[1][0] != "fin" || e.reads[1][2] != "gone" {
		t.Fatalf("reads %d: want %d ids then fin, leaked, gone", len(e.reads), seedPage)
	}
	if len(e.fins) != 1 || e.fins[0].SessionID != "fin" || e.fins[0].Actual != 3 || e.fins[0].ResourceName != "r" ||
		e.fins[0].Retention != 3*time.Hour {
		t.Fatalf("finished %+v, want fin with its charge 3", e.fins)
	}
}

// A finish the store answers "not found" or "conflict" is settled already;
// any other failure ends the catch-up with it. A failed read ends it too.
func TestCatchUpFailures(t *testing.T) {
	fin := row("fin", testEpoch)
	fin.Status = StatusFinished
	snap := []UsageRecord{row("fin", testEpoch), row("fin2", testEpoch)}
	bad := errors.New("bad")
	for _, c := range []struct {
		name     string
		finish   error
		want     error
		finishes int
	}{
		{"not found", ErrSessionNotFound, nil, 2},
		{"conflict", ErrSessionConflict, nil, 2},
		{"other", bad, bad, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newCatchEnv(t, Options{})
			e.rows = map[string]UsageRecord{"fin": fin, "fin2": fin}
			e.st.finish = func(FinishCmd) (FinishResult, error) { return FinishResult{}, c.finish }
			err := e.svc.catchUp(context.Background(), testPolicy, e.per, snap)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) || e.st.n("Finish") != c.finishes {
				t.Fatalf("catch-up: %v after %d finishes, want %v after %d", err, e.st.n("Finish"), c.want, c.finishes)
			}
		})
	}
	t.Run("read fails", func(t *testing.T) {
		e := newCatchEnv(t, Options{})
		e.svc.ledger = snapStubs{stubs: e.st, byID: func([]string) (map[string]UsageRecord, error) { return nil, bad }}
		if err := e.svc.catchUp(context.Background(), testPolicy, e.per, snap); !errors.Is(err, bad) || e.st.n("Finish") != 0 {
			t.Fatalf("catch-up: %v", err)
		}
	})
	t.Run("page fails", func(t *testing.T) {
		e := newCatchEnv(t, Options{})
		e.st.openPage = func(string, int64, int) ([]UsageRecord, int64, error) { return nil, 0, bad }
		if err := e.svc.catchUp(context.Background(), testPolicy, e.per, snap); !errors.Is(err, bad) || e.st.n("CatchUp") != 0 {
			t.Fatalf("catch-up: %v", err)
		}
		if e.st.n("Unlock") != 1 {
			t.Fatal("the lock was not released")
		}
	})
	t.Run("count fails", func(t *testing.T) {
		e := newCatchEnv(t, Options{})
		e.st.restore = func(string, []UsageRecord) error { return bad }
		if err := e.svc.catchUp(context.Background(), testPolicy, e.per, snap); !errors.Is(err, bad) || e.st.n("SessionsByID") != 0 {
			t.Fatalf("catch-up: %v", err)
		}
	})
	t.Run("lock fails", func(t *testing.T) {
		e := newCatchEnv(t, Options{})
		e.st.tryLock = func(string, string) (string, error) { return "", bad }
		if err := e.svc.catchUp(context.Background(), testPolicy, e.per, snap); !errors.Is(err, bad) || e.st.n("OpenSessionsPage") != 0 || e.st.n("Unlock") != 0 {
			t.Fatalf("catch-up: %v", err)
		}
	})
	t.Run("ledger cannot read by id", func(t *testing.T) {
		st := &stubs{}
		svc := newStubService(st, Options{})
		if err := svc.catchUp(context.Background(), testPolicy, Period{Start: testEpoch}, snap); err != nil || st.n("TryLock") != 0 {
			t.Fatalf("catch-up: %v, %d locks", err, st.n("TryLock"))
		}
	})
}

// The catch-up waits for the reconcile lock while another holder has it,
// and gives up when its context ends; it unlocks with its own token.
func TestCatchUpWaitsForTheLock(t *testing.T) {
	e := newCatchEnv(t, Options{})
	tries := 0
	e.st.tryLock = func(_, name string) (string, error) {
		if tries++; tries < 2 || name != "reconcile" {
			return "", nil
		}
		return "tok", nil
	}
	var unlocked string
	e.st.unlock = func(_, _, token string) error { unlocked = token; return nil }
	if err := e.svc.catchUp(context.Background(), testPolicy, e.per, nil); err != nil || tries != 2 || unlocked != "tok" {
		t.Fatalf("catch-up: %v after %d tries, unlocked %q", err, tries, unlocked)
	}
	if e.st.lockTTL != catchUpLockTTL {
		t.Fatalf("lock TTL %v", e.st.lockTTL)
	}
	e.st.tryLock = func(string, string) (string, error) { return "", nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.svc.catchUp(ctx, testPolicy, e.per, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("catch-up with the lock held elsewhere: %v", err)
	}
}

// Scheduling: CatchUpAfter < 0 disables the catch-up, 0 schedules it after
// the default catchUpAfter; it runs once its time comes and reports to
// OnCatchUp; Close drops those not started and schedules no more.
func TestCatchUpScheduling(t *testing.T) {
	e := newCatchEnv(t, Options{CatchUpAfter: -1})
	e.svc.catchUpLater(testPolicy, e.per, nil)
	if len(e.svc.catchUps.timers) != 0 {
		t.Fatal("a disabled catch-up was scheduled")
	}

	e = newCatchEnv(t, Options{})
	e.svc.catchUpLater(testPolicy, e.per, nil)
	if len(e.svc.catchUps.timers) != 1 {
		t.Fatal("the default catch-up was not scheduled")
	}
	e.svc.Close()
	if len(e.svc.catchUps.timers) != 0 || e.st.n("TryLock") != 0 {
		t.Fatal("Close left the scheduled catch-up")
	}
	e.svc.catchUpLater(testPolicy, e.per, nil)
	if len(e.svc.catchUps.timers) != 0 {
		t.Fatal("a catch-up was scheduled after Close")
	}

	done := make(chan string, 1)
	e = newCatchEnv(t, Options{CatchUpAfter: time.Nanosecond, OnCatchUp: func(r string, err error) {
		if err != nil {
			r += ": " + err.Error()
		}
		done <- r
	}})
	e.rows = map[string]UsageRecord{"fin": {SessionID: "fin", PeriodStart: testEpoch, Status: StatusFinished, ChargedAmount: 2}}
	e.svc.catchUpLater(testPolicy, e.per, []UsageRecord{row("fin", testEpoch)})
	select {
	case r := <-done:
		if r != "r" {
			t.Fatalf("OnCatchUp heard %q", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the catch-up did not run")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.fins) != 1 || e.fins[0].Actual != 2 || len(e.svc.catchUps.timers) != 0 {
		t.Fatalf("finished %+v", e.fins)
	}
}
