package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Which failed store calls may have run all the same (issue 11 §3.1): a
// timeout or lost reply may hide a reservation; an open breaker sent
// nothing, and a session conflict is an answer.
func TestMayHaveRun(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", ErrUnavailable), true},
		{context.DeadlineExceeded, true},
		{context.Canceled, true},
		{fmt.Errorf("x: %w: %w", ErrUnavailable, ErrCircuitOpen), false},
		{fmt.Errorf("x: %w: %w", ErrUnavailable, ErrSessionConflict), false},
		{errors.New("bad"), false},
	} {
		if got := mayHaveRun(c.err); got != c.want {
			t.Errorf("mayHaveRun(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// compClock is a settable clock for Options.Now.
type compClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *compClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *compClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type compCall struct{ resource, id, attempt string }

func newCompEnv(t *testing.T) (*Service, *stubs, *compClock, *[]compCall) {
	t.Helper()
	clk := &compClock{t: testEpoch}
	st := &stubs{}
	var mu sync.Mutex
	calls := &[]compCall{}
	st.compensate = func(r, id, a string) (CompensateOutcome, error) {
		mu.Lock()
		defer mu.Unlock()
		*calls = append(*calls, compCall{r, id, a})
		return CompensateGivenBack, nil
	}
	return newStubService(st, Options{Now: clk.now}), st, clk, calls
}

func compCmd(id string) ApplyCmd {
	return ApplyCmd{ResourceName: "r", SessionID: id, Attempt: "a-" + id, Amount: 5}
}

// Only attempts that carry a key, of fail-closed policies, are remembered
// (fail-open grants are answered 200 with a ledger row); pools' applies are
// (their sessions carry the attempt: apply.lua).
func TestCompensateLaterRemembersOnlyKeyedFailClosedApplies(t *testing.T) {
	svc, _, _, _ := newCompEnv(t)
	open := testPolicy
	open.FailMode = FailOpen
	noAttempt := compCmd("x")
	noAttempt.Attempt = ""
	svc.compensateLater(testPolicy, noAttempt, nil)
	svc.compensateLater(open, compCmd("o"), nil)
	if n := svc.PendingCompensations(); n != 0 {
		t.Fatalf("%d pending, want none remembered", n)
	}
	svc.compensateLater(testPolicy, compCmd("s"), nil)
	pools := compCmd("p")
	pools.Pools = &PoolsCmd{Line: "a"}
	svc.compensateLater(testPolicy, pools, nil)
	if n := svc.PendingCompensations(); n != 2 {
		t.Fatalf("%d pending, want 2 (the plain and the pools' apply)", n)
	}
	p := svc.comp.pending[0]
	if p.resource != "r" || p.sessionID != "s" || p.attempt != "a-s" || !p.added.Equal(testEpoch) {
		t.Fatalf("remembered %+v", p)
	}
	if p := svc.comp.pending[1]; p.sessionID != "p" || p.attempt != "a-p" {
		t.Fatalf("remembered the pools' apply as %+v", p)
	}
	select {
	case <-svc.comp.wake:
	default:
		t.Fatal("adding an attempt did not wake the loop")
	}
}

// The remembered attempts are bounded: past compensateMaxPending new ones
// are left to the sweeper.
func TestCompensateLaterIsBounded(t *testing.T) {
	svc, _, _, _ := newCompEnv(t)
	svc.comp.pending = make([]pendingAttempt, compensateMaxPending-1)
	svc.compensateLater(testPolicy, compCmd("last"), nil)
	if n := svc.PendingCompensations(); n != compensateMaxPending {
		t.Fatalf("%d pending, want the bound %d reached", n, compensateMaxPending)
	}
	svc.compensateLater(testPolicy, compCmd("over"), nil)
	if n := svc.PendingCompensations(); n != compensateMaxPending {
		t.Fatalf("%d pending past the bound", n)
	}
	if svc.comp.pending[compensateMaxPending-1].sessionID != "last" {
		t.Fatal("the entry over the bound replaced one")
	}
}

// A given-back attempt is settled: its Compensate carried its own key, and
// givenBack ran (the row is then marked CANCELLED); NotItsOwn settles it
// without givenBack.
func TestCompensationGivesBackTheAttemptsOwnReservation(t *testing.T) {
	svc, st, _, calls := newCompEnv(t)
	var marked []string
	svc.compensateLater(testPolicy, compCmd("a"), func() { marked = append(marked, "a") })
	svc.compensateLater(testPolicy, compCmd("b"), func() { marked = append(marked, "b") })
	st.compensate = func(r, id, a string) (CompensateOutcome, error) {
		*calls = append(*calls, compCall{r, id, a})
		if id == "b" {
			return CompensateNotItsOwn, nil
		}
		return CompensateGivenBack, nil
	}
	svc.compensatePending(context.Background())
	if len(*calls) != 2 || (*calls)[0] != (compCall{"r", "a", "a-a"}) || (*calls)[1] != (compCall{"r", "b", "a-b"}) {
		t.Fatalf("calls %+v", *calls)
	}
	if len(marked) != 1 || marked[0] != "a" {
		t.Fatalf("givenBack ran for %v, want a only", marked)
	}
	if n := svc.PendingCompensations(); n != 0 {
		t.Fatalf("%d pending after both settled", n)
	}
	svc.compensatePending(context.Background()) // nothing pending: no call
	if st.n("Compensate") != 2 {
		t.Fatalf("%d Compensate calls", st.n("Compensate"))
	}
}

// While the store fails, the first failure stops the round: the rest are
// kept untried, and all are tried again later.
func TestCompensationStopsAtTheFirstFailureAndRetries(t *testing.T) {
	svc, st, _, calls := newCompEnv(t)
	svc.compensateLater(testPolicy, compCmd("a"), nil)
	svc.compensateLater(testPolicy, compCmd("b"), nil)
	fail := true
	st.compensate = func(r, id, a string) (CompensateOutcome, error) {
		*calls = append(*calls, compCall{r, id, a})
		if fail {
			return 0, fmt.Errorf("x: %w", ErrUnavailable)
		}
		return CompensateGivenBack, nil
	}
	svc.compensatePending(context.Background())
	if len(*calls) != 1 || svc.PendingCompensations() != 2 {
		t.Fatalf("calls %+v, pending %d: want one try, both kept", *calls, svc.PendingCompensations())
	}
	fail = false
	svc.compensatePending(context.Background())
	if len(*calls) != 3 || svc.PendingCompensations() != 0 {
		t.Fatalf("calls %+v, pending %d: want both given back", *calls, svc.PendingCompensations())
	}
}

// An attempt whose session is absent is tried again until
// compensateAbsentFor after the first such answer (its script may still be
// queued); one never answered is dropped past compensateMaxAge.
func TestCompensationAbsentAndMaxAge(t *testing.T) {
	svc, st, clk, calls := newCompEnv(t)
	st.compensate = func(r, id, a string) (CompensateOutcome, error) {
		*calls = append(*calls, compCall{r, id, a})
		return CompensateAbsent, nil
	}
	svc.compensateLater(testPolicy, compCmd("a"), nil)
	svc.compensatePending(context.Background())
	if svc.PendingCompensations() != 1 || !svc.comp.pending[0].absentSince.Equal(testEpoch) {
		t.Fatalf("absent once: pending %+v", svc.comp.pending)
	}
	clk.add(compensateAbsentFor - time.Millisecond)
	svc.compensatePending(context.Background())
	if svc.PendingCompensations() != 1 || !svc.comp.pending[0].absentSince.Equal(testEpoch) {
		t.Fatalf("absent just under %v: pending %+v", compensateAbsentFor, svc.comp.pending)
	}
	clk.add(time.Millisecond)
	svc.compensatePending(context.Background())
	if svc.PendingCompensations() != 0 || len(*calls) != 3 {
		t.Fatalf("absent for %v: pending %d, calls %d; want dropped after 3 tries", compensateAbsentFor, svc.PendingCompensations(), len(*calls))
	}

	// Never answered: kept up to compensateMaxAge, then dropped untried.
	st.compensate = func(r, id, a string) (CompensateOutcome, error) {
		*calls = append(*calls, compCall{r, id, a})
		return 0, ErrUnavailable
	}
	svc.compensateLater(testPolicy, compCmd("b"), nil)
	clk.add(compensateMaxAge)
	svc.compensatePending(context.Background())
	if svc.PendingCompensations() != 1 || len(*calls) != 4 {
		t.Fatalf("at max age: pending %d, calls %d; want tried and kept", svc.PendingCompensations(), len(*calls))
	}
	clk.add(time.Millisecond)
	svc.compensatePending(context.Background())
	if svc.PendingCompensations() != 0 || len(*calls) != 4 {
		t.Fatalf("past max age: pending %d, calls %d; want dropped untried", svc.PendingCompensations(), len(*calls))
	}
}

// With its context done, the loop sends nothing and keeps every attempt.
func TestCompensationKeepsAllWhenItsContextEnded(t *testing.T) {
	svc, st, _, _ := newCompEnv(t)
	svc.compensateLater(testPolicy, compCmd("a"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	svc.compensatePending(ctx)
	if st.n("Compensate") != 0 || svc.PendingCompensations() != 1 {
		t.Fatalf("calls %d, pending %d", st.n("Compensate"), svc.PendingCompensations())
	}
}

// RunCompensation gives back a remembered attempt once woken, and returns
// nil when its context ends.
func TestRunCompensation(t *testing.T) {
	svc, _, _, _ := newCompEnv(t)
	var mu sync.Mutex
	given := false
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.RunCompensation(ctx) }()
	svc.compensateLater(testPolicy, compCmd("a"), func() { mu.Lock(); given = true; mu.Unlock() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		g := given
		mu.Unlock()
		if g && svc.PendingCompensations() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt was not given back")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunCompensation: %v", err)
	}
}

// An apply whose store call timed out is remembered, under both forms of
// its id (the script may have used either, scope.go); one refused by the
// open breaker is not (nothing was sent).
func TestApplyRemembersOnlyCallsThatMayHaveRun(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"timeout", fmt.Errorf("x: %w: %w", ErrUnavailable, context.DeadlineExceeded), 2},
		{"breaker open", fmt.Errorf("x: %w: %w", ErrUnavailable, ErrCircuitOpen), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &stubs{apply: func(ApplyCmd) (ApplyResult, error) { return ApplyResult{}, c.err }}
			svc := newStubService(st, Options{})
			_, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1", ClientID: "c1"})
			if err == nil {
				t.Fatal("apply succeeded")
			}
			if n := svc.PendingCompensations(); n != c.want {
				t.Fatalf("%d pending, want %d", n, c.want)
			}
		})
	}
}
