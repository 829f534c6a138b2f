package quota

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// ledgerStub is an in-process ledger of session rows keyed by id, with an
// insert that may fail after (or before) writing.
type ledgerStub struct {
	mu   sync.Mutex
	rows map[string]UsageRecord
}

func (l *ledgerStub) put(r UsageRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rows == nil {
		l.rows = map[string]UsageRecord{}
	}
	l.rows[r.SessionID] = r
}

func (l *ledgerStub) get(id string) (UsageRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[id]
	if !ok {
		return UsageRecord{}, ErrSessionNotFound
	}
	return r, nil
}

// recordEnv is a service whose balance store grants (or replays) and whose
// ledger is a ledgerStub; cancelled lists the reservations given back.
type recordEnv struct {
	st        *stubs
	led       *ledgerStub
	svc       *Service
	cancelled []string
}

func newRecordEnv(t *testing.T, outcome ApplyOutcome, failMode FailMode) *recordEnv {
	t.Helper()
	e := &recordEnv{led: &ledgerStub{}}
	e.st = &stubs{
		getPolicy: func(string) (Policy, error) { p := testPolicy; p.FailMode = failMode; return p, nil },
		apply: func(c ApplyCmd) (ApplyResult, error) {
			return ApplyResult{Outcome: outcome, Granted: c.Amount, Remaining: 50, PeriodStart: c.Period.Start,
				StartTime: testEpoch, LeaseExpiresAt: testEpoch.Add(2 * time.Hour)}, nil
		},
		session: e.led.get,
		cancel:  func(_, id string) error { e.cancelled = append(e.cancelled, id); return nil },
	}
	e.svc = newStubService(e.st, Options{})
	return e
}

func (e *recordEnv) apply(t *testing.T) (ApplyResponse, error) {
	t.Helper()
	return e.svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
}

// The row of a grant that the ledger may or may not have written (the
// connection died after the commit) is read back: if it landed, the grant
// stands; if not, the reservation is given back and the apply fails.
func TestGrantWhoseRowMayNotHaveLanded(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = func(r UsageRecord) error { e.led.put(r); return ErrUnavailable } // landed, answer lost
	if resp, err := e.apply(t); err != nil || resp.Granted != 5 || len(e.cancelled) != 0 {
		t.Fatalf("landed: %+v, %v, cancelled %v", resp, err, e.cancelled)
	}

	for name, landed := range map[string]func(UsageRecord) UsageRecord{
		"nothing":             nil,
		"another resource":    func(r UsageRecord) UsageRecord { r.ResourceName = "x"; return r },
		"a finished row":      func(r UsageRecord) UsageRecord { r.Status = StatusFinished; return r },
		"another grant":       func(r UsageRecord) UsageRecord { r.GrantedAmount++; return r },
		"another period":      func(r UsageRecord) UsageRecord { r.PeriodStart = r.PeriodStart.Add(time.Hour); return r },
		"only after deadline": nil,
	} {
		e := newRecordEnv(t, ApplyGranted, FailClosed)
		e.st.insert = func(r UsageRecord) error {
			if landed != nil {
				e.led.put(landed(r))
			}
			return ErrUnavailable
		}
		_, err := e.apply(t)
		if !errors.Is(err, ErrUnavailable) || len(e.cancelled) != 1 || e.cancelled[0] != "s-1" {
			t.Errorf("%s: %v, cancelled %v; want ErrUnavailable and the reservation given back", name, err, e.cancelled)
		}
	}
}

// A replayed apply whose row write fails gives nothing back: the
// reservation is the first request's.
func TestReplayWhoseRowFailsKeepsTheReservation(t *testing.T) {
	e := newRecordEnv(t, ApplyReplayed, FailClosed)
	e.st.insert = func(UsageRecord) error { return ErrUnavailable }
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) || len(e.cancelled) != 0 || e.st.n("MarkFailOpen") != 0 {
		t.Fatalf("%v, cancelled %v, %d marked", err, e.cancelled, e.st.n("MarkFailOpen"))
	}
}

// A grant of a FailMode OPEN policy whose row cannot be written stays
// counted in Redis, flagged for reconciliation to write the row; if even
// the flag cannot be set, the reservation is given back (and the apply
// fails open uncounted, as for any outage).
func TestOpenGrantWhoseRowFailsIsFlagged(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailOpen)
	e.st.insert = func(UsageRecord) error { return ErrUnavailable }
	var marked string
	e.st.markFailOpen = func(_, id string) error { marked = id; return nil }
	resp, err := e.apply(t)
	if err != nil || !resp.FailOpen || !errors.Is(resp.FailOpenCause, ErrUnavailable) || resp.Granted != 5 ||
		resp.Remaining != 50 || marked != "s-1" || len(e.cancelled) != 0 {
		t.Fatalf("%+v, %v; marked %q, cancelled %v", resp, err, marked, e.cancelled)
	}
	e.st.markFailOpen = func(string, string) error { return ErrUnavailable }
	if resp, err := e.apply(t); err != nil || !resp.FailOpen || resp.FailOpenRecorded || resp.Drawn != (PoolSplit{}) ||
		resp.Remaining != -1 || len(e.cancelled) != 1 {
		t.Fatalf("flag failed: %+v, %v, cancelled %v", resp, err, e.cancelled)
	}
	// A failure that is not an outage is not failed open.
	e = newRecordEnv(t, ApplyGranted, FailOpen)
	bad := errors.New("constraint violated")
	e.st.insert = func(UsageRecord) error { return bad }
	if _, err := e.apply(t); !errors.Is(err, bad) || e.st.n("MarkFailOpen") != 0 || len(e.cancelled) != 1 {
		t.Fatalf("not an outage: %v, %d marked, cancelled %v", err, e.st.n("MarkFailOpen"), e.cancelled)
	}
}

// The session id is in the ledger already. The same session's open row
// of this grant: keep it (an earlier attempt lost its answer). The same
// session settled or of another grant: give the fresh reservation back and
// answer from the ledger. Another session's row: give it back, conflict.
func TestGrantWhoseIDIsInTheLedger(t *testing.T) {
	dup := func(UsageRecord) error { return ErrDuplicateSession }
	mine := UsageRecord{ResourceName: "r", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5, ChargedAmount: 5,
		PeriodStart: testEpoch, StartTime: testEpoch.Add(time.Hour), Status: StatusUsing}

	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert, e.led.rows = dup, map[string]UsageRecord{"s-1": mine}
	if resp, err := e.apply(t); err != nil || resp.Replayed || resp.Granted != 5 || resp.Remaining != 50 || len(e.cancelled) != 0 {
		t.Fatalf("own open row: %+v, %v, cancelled %v", resp, err, e.cancelled)
	}

	for name, change := range map[string]func(*UsageRecord){
		"finished":       func(r *UsageRecord) { r.Status = StatusFinished; r.ChargedAmount = 3 },
		"another grant":  func(r *UsageRecord) { r.GrantedAmount = 4 },
		"another period": func(r *UsageRecord) { r.PeriodStart = testEpoch.Add(-24 * time.Hour) },
	} {
		row := mine
		change(&row)
		e := newRecordEnv(t, ApplyGranted, FailClosed)
		e.st.insert, e.led.rows = dup, map[string]UsageRecord{"s-1": row}
		resp, err := e.apply(t)
		// The reservation just made is given back: remaining grows by it.
		if err != nil || !resp.Replayed || resp.Granted != row.GrantedAmount || resp.Remaining != 55 || len(e.cancelled) != 1 {
			t.Errorf("%s: %+v, %v, cancelled %v", name, resp, err, e.cancelled)
		}
	}

	other := mine
	other.ApplyAmount = 9
	e = newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert, e.led.rows = dup, map[string]UsageRecord{"s-1": other}
	if _, err := e.apply(t); !errors.Is(err, ErrSessionConflict) || len(e.cancelled) != 1 {
		t.Fatalf("another session's id: %v, cancelled %v", err, e.cancelled)
	}

	// The row cannot be read: the grant is given back.
	e = newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = dup
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrUnavailable }
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) || len(e.cancelled) != 1 {
		t.Fatalf("unreadable row: %v, cancelled %v", err, e.cancelled)
	}
}

// A replay whose first request wrote the row is answered as replayed; a
// replay of a finished session is answered from its row, and gives back
// nothing more than the reservation (none: it is the first request's).
func TestReplayWhoseIDIsInTheLedger(t *testing.T) {
	dup := func(UsageRecord) error { return ErrDuplicateSession }
	row := UsageRecord{ResourceName: "r", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5, PeriodStart: testEpoch,
		StartTime: testEpoch, Status: StatusUsing}
	e := newRecordEnv(t, ApplyReplayed, FailClosed)
	e.st.insert, e.led.rows = dup, map[string]UsageRecord{"s-1": row}
	if resp, err := e.apply(t); err != nil || !resp.Replayed || resp.Granted != 5 || len(e.cancelled) != 0 {
		t.Fatalf("replay: %+v, %v, cancelled %v", resp, err, e.cancelled)
	}
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrUnavailable }
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) || len(e.cancelled) != 0 {
		t.Fatalf("replay, unreadable row: %v, cancelled %v", err, e.cancelled)
	}
}

// A replay of a session the store made after the ledger's row was settled
// (the store lost the finished session; another request with the id, at
// the same time, granted it afresh and will give that back when its insert
// finds the row) is not a replay of the row's session: it is answered from
// the row, and the fresh reservation is given back. Before the fix it was
// answered with the fresh grant's lease and remaining, a grant that was
// then given back (seen: 16 concurrent retries of a finished session after
// its resource's Redis keys were deleted answered two different leases).
func TestReplayOfAFreshGrantOfASettledRow(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	for _, status := range []Status{StatusFinished, StatusLeaked} {
		row := UsageRecord{ResourceName: "r", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5, ChargedAmount: 5,
			PeriodStart: testEpoch, StartTime: now.Add(-10 * time.Second), EndTime: now.Add(-5 * time.Second), Status: status}
		e := newRecordEnv(t, ApplyReplayed, FailClosed)
		e.st.apply = func(c ApplyCmd) (ApplyResult, error) {
			return ApplyResult{Outcome: ApplyReplayed, Granted: 5, Remaining: 50, PeriodStart: c.Period.Start,
				StartTime: now, LeaseExpiresAt: now.Add(testPolicy.LeaseDuration())}, nil
		}
		e.st.insert, e.led.rows = func(UsageRecord) error { return ErrDuplicateSession }, map[string]UsageRecord{"s-1": row}
		resp, err := e.apply(t)
		if want := row.StartTime.Add(testPolicy.LeaseDuration()); err != nil || !resp.Replayed || resp.Granted != 5 ||
			!resp.LeaseExpiresAt.Equal(want) || resp.Remaining != 55 || !slices.Equal(e.cancelled, []string{"s-1"}) {
			t.Fatalf("%s row: %+v, %v, cancelled %v; want the row's lease (%v), remaining 55 and the fresh grant given back",
				status, resp, err, e.cancelled, want)
		}
	}
}

// An id whose ledger row is another client's session (Redis no longer
// holds it) is scoped (scope.go): the grant made under the bare id is
// given back and the apply is made again under "r/c1/s-1", which is
// answered as its own session; with GlobalSessionIDs, and for a caller
// without a client id, it is a conflict, as before ids were scoped.
func TestApplyOfAnIDWhoseRowIsAnotherClients(t *testing.T) {
	row := UsageRecord{ResourceName: "r", ClientID: "c9", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5,
		PeriodStart: testEpoch, StartTime: testEpoch, Status: StatusFinished}
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	var applied []string
	apply := e.st.apply
	e.st.apply = func(c ApplyCmd) (ApplyResult, error) {
		applied = append(applied, c.SessionID+"|"+c.OtherSessionID)
		return apply(c)
	}
	e.led.rows = map[string]UsageRecord{"s-1": row}
	e.st.insert = func(r UsageRecord) error {
		if _, err := e.led.get(r.SessionID); err == nil {
			return ErrDuplicateSession
		}
		e.led.put(r)
		return nil
	}
	req := ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1", ClientID: "c1"}
	resp, err := e.svc.Apply(context.Background(), req)
	if err != nil || resp.SessionID != "s-1" || resp.Granted != 5 || resp.Replayed {
		t.Fatalf("apply: %+v, %v", resp, err)
	}
	if want := []string{"s-1|r/c1/s-1", "r/c1/s-1|"}; !slices.Equal(applied, want) || !slices.Equal(e.cancelled, []string{"s-1"}) {
		t.Fatalf("applied %v (want %v), cancelled %v (want the bare grant)", applied, want, e.cancelled)
	}
	if got, _ := e.led.get("r/c1/s-1"); got.ClientID != "c1" || got.GrantedAmount != 5 {
		t.Fatalf("scoped row %+v", got)
	}
	if _, err := e.apply(t); !errors.Is(err, ErrSessionConflict) {
		t.Fatalf("without a client id: %v, want a conflict (no scope)", err)
	}

	e = newRecordEnv(t, ApplyReplayed, FailClosed)
	e.svc = newStubService(e.st, Options{GlobalSessionIDs: true})
	e.st.insert, e.led.rows = func(UsageRecord) error { return ErrDuplicateSession }, map[string]UsageRecord{"s-1": row}
	if _, err := e.svc.Apply(context.Background(), req); !errors.Is(err, ErrSessionConflict) {
		t.Fatalf("global ids: replay of another client's id: %v", err)
	}
}

// The give-back runs on a deadline of its own: a request whose context is
// already over still gives its reservation back.
func TestReservationIsGivenBackAfterTheCallerLeft(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	ctx, cancel := context.WithCancel(context.Background())
	e.st.insert = func(UsageRecord) error { cancel(); return ErrUnavailable }
	if _, err := e.svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); !errors.Is(err, ErrUnavailable) ||
		len(e.cancelled) != 1 {
		t.Fatalf("%v, cancelled %v", err, e.cancelled)
	}
	// The read-back and the fail-open flag too.
	e = newRecordEnv(t, ApplyGranted, FailOpen)
	ctx, cancel = context.WithCancel(context.Background())
	e.st.insert = func(r UsageRecord) error { cancel(); return ErrUnavailable }
	if resp, err := e.svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); err != nil ||
		!resp.FailOpen || e.st.n("MarkFailOpen") != 1 {
		t.Fatalf("open: %+v, %v", resp, err)
	}
	e = newRecordEnv(t, ApplyGranted, FailClosed)
	ctx, cancel = context.WithCancel(context.Background())
	e.st.insert = func(r UsageRecord) error { e.led.put(r); cancel(); return ErrUnavailable }
	if resp, err := e.svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); err != nil || resp.Granted != 5 {
		t.Fatalf("landed: %+v, %v", resp, err)
	}
}
