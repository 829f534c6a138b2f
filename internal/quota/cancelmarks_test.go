package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// closeWithin calls svc.Close and fails if it does not return.
func closeWithin(t *testing.T, svc *Service) {
	t.Helper()
	done := make(chan struct{})
	go func() { svc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// waitIdle waits for the background marking to end.
func waitIdle(t *testing.T, svc *Service) {
	t.Helper()
	_, idle := svc.PendingCancels()
	if idle == nil {
		t.Fatal("no marking was started")
	}
	select {
	case <-idle:
	case <-time.After(30 * time.Second):
		t.Fatal("the marking did not end")
	}
}

// A mark carries the row as CANCELLED, ended at the Service's clock in
// whole milliseconds (UTC); a refusal that is no backend failure (the row is
// gone, say) settles it too, without a retry.
func TestMarkCancelledMarksTheRow(t *testing.T) {
	var mu sync.Mutex
	var got []UsageRecord
	st := &stubs{cancelRow: func(r UsageRecord) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		return errors.New("not a backend failure")
	}}
	now := time.Date(2025, 6, 1, 3, 4, 5, 6789999, time.FixedZone("X", 3600))
	svc := newStubService(st, Options{Now: func() time.Time { return now }})
	if n, idle := svc.PendingCancels(); n != 0 || idle != nil {
		t.Fatalf("before any mark: %d, %v", n, idle)
	}
	svc.markCancelled(UsageRecord{ResourceName: "r", SessionID: "s", StartTime: testEpoch, Status: StatusUsing, GrantedAmount: 5})
	waitIdle(t, svc)
	mu.Lock()
	defer mu.Unlock()
	want := now.UTC().Truncate(time.Millisecond)
	if len(got) != 1 || got[0].Status != StatusCancelled || !got[0].EndTime.Equal(want) || got[0].EndTime.Location() != time.UTC ||
		got[0].SessionID != "s" || got[0].GrantedAmount != 5 {
		t.Fatalf("marks %+v, want one CANCELLED ended %v", got, want)
	}
	if n, _ := svc.PendingCancels(); n != 0 {
		t.Fatalf("%d pending", n)
	}
}

// While the ledger is unreachable every pending mark is kept and tried
// again; two attempts of one session are marked each on its own.
func TestMarksAreRetriedWhileTheLedgerIsUnreachable(t *testing.T) {
	var mu sync.Mutex
	fails := 2
	var ok []UsageRecord
	gate := make(chan struct{})
	st := &stubs{}
	svc := newStubService(st, Options{})
	st.cancelRow = func(r UsageRecord) error {
		<-gate
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return fmt.Errorf("x: %w", ErrUnavailable)
		}
		ok = append(ok, r)
		return nil
	}
	svc.markCancelled(UsageRecord{SessionID: "s", StartTime: testEpoch})
	svc.markCancelled(UsageRecord{SessionID: "s", StartTime: testEpoch.Add(time.Second)})
	if n, _ := svc.PendingCancels(); n != 2 {
		t.Fatalf("%d pending, want 2 (one per attempt)", n)
	}
	close(gate)
	waitIdle(t, svc)
	mu.Lock()
	defer mu.Unlock()
	if len(ok) != 2 || ok[0].StartTime.Equal(ok[1].StartTime) || st.n("CancelSession") < 4 {
		t.Fatalf("marked %+v after %d calls; want both attempts marked after the failures", ok, st.n("CancelSession"))
	}
	if n, _ := svc.PendingCancels(); n != 0 {
		t.Fatalf("%d pending", n)
	}
}

// The pending marks are bounded at cancelPendingMax; a mark of an attempt
// already pending replaces it even then.
func TestMarksAreBounded(t *testing.T) {
	st := &stubs{}
	svc := newStubService(st, Options{})
	m := &svc.cancels
	m.pending, m.stop, m.running = map[cancelKey]UsageRecord{}, make(chan struct{}), true // no drain runs
	for i := range cancelPendingMax - 1 {
		m.pending[cancelKey{fmt.Sprint(i), 0}] = UsageRecord{}
	}
	svc.markCancelled(UsageRecord{SessionID: "last", StartTime: testEpoch})
	if n, _ := svc.PendingCancels(); n != cancelPendingMax {
		t.Fatalf("%d pending, want the bound reached", n)
	}
	svc.markCancelled(UsageRecord{SessionID: "over", StartTime: testEpoch})
	if n, _ := svc.PendingCancels(); n != cancelPendingMax {
		t.Fatalf("%d pending past the bound", n)
	}
	if _, ok := m.pending[cancelKey{"over", testEpoch.UnixMilli()}]; ok {
		t.Fatal("a mark over the bound was kept")
	}
	svc.markCancelled(UsageRecord{SessionID: "last", StartTime: testEpoch, GrantedAmount: 7})
	if r := m.pending[cancelKey{"last", testEpoch.UnixMilli()}]; r.GrantedAmount != 7 {
		t.Fatalf("pending mark %+v, want it replaced", r)
	}
	if st.n("CancelSession") != 0 {
		t.Fatal("a second drain was started")
	}
}

// Close stops the retries: the mark in progress ends, the rest are left to
// reconciliation, and no new marks are made afterwards. Close is safe to
// call twice, and on a Service that never marked.
func TestCloseStopsTheMarks(t *testing.T) {
	(&Service{}).Close()
	st := &stubs{cancelRow: func(UsageRecord) error { return fmt.Errorf("x: %w", ErrUnavailable) }}
	// Close at once: TestCloseWaitsBoundedForThePendingMarks covers its wait.
	svc := newStubService(st, Options{CloseMarksWait: -1})
	svc.markCancelled(UsageRecord{SessionID: "s", StartTime: testEpoch})
	_, idle := svc.PendingCancels()
	deadline := time.Now().Add(10 * time.Second)
	for st.n("CancelSession") < 2 { // retried at least once
		if time.Now().After(deadline) {
			t.Fatal("the mark was not retried")
		}
		time.Sleep(time.Millisecond)
	}
	closeWithin(t, svc)
	select {
	case <-idle:
	default:
		t.Fatal("Close returned before the marking ended")
	}
	calls := st.n("CancelSession")
	svc.markCancelled(UsageRecord{SessionID: "t", StartTime: testEpoch})
	if n, _ := svc.PendingCancels(); n != 1 {
		t.Fatalf("%d pending after Close, want the unmade mark only", n)
	}
	closeWithin(t, svc)
	if st.n("CancelSession") != calls {
		t.Fatal("a mark was made after Close")
	}
}

// A reservation whose give-back failed is compensated later; once that
// gives it back, the row is marked CANCELLED (record.go, cancel).
func TestRowIsMarkedOnceTheCompensationGaveItBack(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = func(r UsageRecord) error { return fmt.Errorf("x: %w", ErrUnavailable) }
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, fmt.Errorf("read: %w", ErrUnavailable) }
	e.st.cancel = func(_, _ string) error { return fmt.Errorf("cancel: %w", ErrUnavailable) }
	var comp []string
	e.st.compensate = func(r, id, a string) (CompensateOutcome, error) {
		comp = append(comp, r+"/"+id)
		return CompensateGivenBack, nil
	}
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply: %v", err)
	}
	if n, idle := e.svc.PendingCancels(); n != 0 || idle != nil || e.svc.PendingCompensations() != 1 {
		t.Fatalf("give-back failed: marks %d, compensations %d; want only the compensation", n, e.svc.PendingCompensations())
	}
	e.svc.compensatePending(context.Background())
	if len(comp) != 1 || comp[0] != "r/s-1" {
		t.Fatalf("compensations %v", comp)
	}
	waitIdle(t, e.svc)
	if e.st.n("CancelSession") != 1 {
		t.Fatalf("%d CancelSession calls, want the row marked once", e.st.n("CancelSession"))
	}
}

// downLedger is a Service (on the clock, for synctest) whose ledger is
// unreachable until up is set.
func downLedger() (*stubs, *Service, *atomic.Bool) {
	up := new(atomic.Bool)
	st := &stubs{cancelRow: func(UsageRecord) error {
		if !up.Load() {
			return fmt.Errorf("x: %w", ErrUnavailable)
		}
		return nil
	}}
	return st, newStubService(st, Options{Now: time.Now}), up
}

// Close waits, bounded, for the marks still to be made (docs/reliability.md
// G1, the rest): a ledger that answers again within Options.CloseMarksWait
// gets every mark, though the retries had backed off; one that does not
// delays Close by that bound, plus the attempt in progress, at most. Before,
// Close stopped the retries at once and the marks were lost with the
// instance.
func TestCloseWaitsBoundedForThePendingMarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, svc, up := downLedger()
		svc.markCancelled(UsageRecord{SessionID: "a", StartTime: testEpoch})
		svc.markCancelled(UsageRecord{SessionID: "b", StartTime: testEpoch})
		time.Sleep(2 * time.Second) // the ledger stays down; the retries back off
		closed := make(chan struct{})
		go func() { svc.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned with two marks pending and its wait not over")
		default:
		}
		time.Sleep(closeMarksWait / 2)
		up.Store(true) // the ledger is back within the bound
		<-closed
		if n, _ := svc.PendingCancels(); n != 0 {
			t.Fatalf("%d marks left after Close, want every one made", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		st := &stubs{cancelRow: func(UsageRecord) error { return fmt.Errorf("x: %w", ErrUnavailable) }}
		svc := newStubService(st, Options{Now: time.Now})
		svc.markCancelled(UsageRecord{SessionID: "a", StartTime: testEpoch})
		start := time.Now()
		svc.Close()
		if d := time.Since(start); d < closeMarksWait || d > closeMarksWait+cancelTimeout {
			t.Fatalf("Close took %v with the ledger down; want its wait, %v, plus at most one attempt's %v", d, closeMarksWait, cancelTimeout)
		}
		if n, _ := svc.PendingCancels(); n != 1 {
			t.Fatalf("%d marks pending after Close, want the unmade one", n)
		}
	})
}

// While the ledger is down the retries back off, from cancelRetryMin
// doubling up to cancelRetryMax; once Close waits for the marks, they are
// retried every cancelRetryMin (in fake time: synctest).
func TestMarkRetriesBackOffUntilCloseWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, svc, up := downLedger()
		svc.markCancelled(UsageRecord{SessionID: "a", StartTime: testEpoch})
		time.Sleep(2 * time.Second)
		// Tries at 0, 50, 150, 350, 750 and 1550 ms; the next at 3150 ms.
		if n := st.n("CancelSession"); n != 6 {
			t.Fatalf("%d tries in 2 s with the ledger down, want 6 (backing off from %v)", n, cancelRetryMin)
		}
		closed := make(chan struct{})
		go func() { svc.Close(); close(closed) }()
		time.Sleep(time.Second + cancelRetryMin/2)
		// Tries at once, then every 50 ms: 2000, 2050, …, 3000 ms.
		if n := st.n("CancelSession") - 6; n != 21 {
			t.Fatalf("%d tries in Close's first 1.025 s, want 21 (every %v)", n, cancelRetryMin)
		}
		up.Store(true)
		<-closed
		if n, _ := svc.PendingCancels(); n != 0 {
			t.Fatalf("%d marks left after Close", n)
		}
	})
}
