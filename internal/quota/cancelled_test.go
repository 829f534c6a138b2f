package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// An apply answered 503 after an insert whose outcome is unknown gives its
// reservation back and marks its row CANCELLED in the ledger, retrying while
// the ledger is unavailable (docs/reliability.md G1: the Redis tombstone
// alone can be lost).
func TestRefusedGrantIsMarkedCancelledInTheLedger(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = func(r UsageRecord) error { e.led.put(r); return ErrUnavailable } // landed, answer lost
	unreadable := fmt.Errorf("read: %w", ErrUnavailable)
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, unreadable }
	var mu sync.Mutex
	var tries []UsageRecord
	e.st.cancelRow = func(r UsageRecord) error {
		mu.Lock()
		defer mu.Unlock()
		if tries = append(tries, r); len(tries) < 3 {
			return fmt.Errorf("cancel: %w", ErrUnavailable)
		}
		row, _ := e.led.get(r.SessionID)
		if row.Status == StatusUsing && row.StartTime.Equal(r.StartTime) && row.GrantedAmount == r.GrantedAmount {
			row.Status, row.ChargedAmount, row.RefundedAmount = StatusCancelled, 0, row.GrantedAmount
			e.led.put(row)
		}
		return nil
	}
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) || len(e.cancelled) != 1 {
		t.Fatalf("apply whose row could not be read back: %v, cancelled %v; want ErrUnavailable and the reservation given back", err, e.cancelled)
	}
	_, idle := e.svc.PendingCancels()
	if idle == nil {
		t.Fatal("no CANCELLED mark was started")
	}
	select {
	case <-idle:
	case <-time.After(30 * time.Second):
		t.Fatal("the CANCELLED mark was not made")
	}
	if n, _ := e.svc.PendingCancels(); n != 0 {
		t.Fatalf("%d marks pending after the drain", n)
	}
	row, _ := e.led.get("s-1")
	mu.Lock()
	defer mu.Unlock()
	if len(tries) != 3 || row.Status != StatusCancelled || row.ChargedAmount != 0 || tries[2].Status != StatusCancelled ||
		!tries[2].StartTime.Equal(testEpoch) || tries[2].GrantedAmount != 5 || tries[2].EndTime.IsZero() {
		t.Fatalf("tries %+v, row %+v: want three tries, the last marking the row CANCELLED", tries, row)
	}
}

// A retry of an apply whose row is CANCELLED starts afresh: the fresh
// reservation is kept and the row revived as its own; if the row cannot be
// revived, the reservation is given back and the retry fails.
func TestRetryOfACancelledApplyStartsAfresh(t *testing.T) {
	for _, c := range []struct {
		name    string
		revive  func(UsageRecord) (bool, error)
		granted bool
	}{
		{"revived", nil, true},
		{"row changed meanwhile", func(UsageRecord) (bool, error) { return false, nil }, false},
		{"ledger unavailable", func(UsageRecord) (bool, error) { return false, ErrUnavailable }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newRecordEnv(t, ApplyGranted, FailClosed)
			e.led.put(UsageRecord{ResourceName: "r", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5,
				PeriodStart: testEpoch.Add(-time.Hour), StartTime: testEpoch.Add(-time.Minute), Status: StatusCancelled})
			e.st.insert = func(UsageRecord) error { return ErrDuplicateSession }
			var revived []UsageRecord
			e.st.reviveRow = func(r UsageRecord) (bool, error) {
				revived = append(revived, r)
				if c.revive != nil {
					return c.revive(r)
				}
				return true, nil
			}
			resp, err := e.apply(t)
			if len(revived) != 1 || !revived[0].StartTime.Equal(testEpoch) || revived[0].Status != StatusUsing {
				t.Fatalf("revived %+v: want one revival with the retry's own start", revived)
			}
			if c.granted {
				if err != nil || resp.Granted != 5 || resp.Replayed || len(e.cancelled) != 0 {
					t.Fatalf("retry: %+v, %v, cancelled %v; want a fresh grant kept", resp, err, e.cancelled)
				}
				return
			}
			if !errors.Is(err, ErrUnavailable) || len(e.cancelled) != 1 {
				t.Fatalf("retry: %+v, %v, cancelled %v; want ErrUnavailable, the reservation given back", resp, err, e.cancelled)
			}
		})
	}
}

// A retry refused for lack of quota, whose row is CANCELLED, is answered
// with its refusal: the CANCELLED row granted nothing, so it is no replay.
func TestRefusedRetryOfACancelledApplyIsARefusal(t *testing.T) {
	e := newRecordEnv(t, ApplyExhausted, FailClosed)
	e.led.put(UsageRecord{ResourceName: "r", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5,
		PeriodStart: testEpoch, StartTime: testEpoch, Status: StatusCancelled})
	resp, err := e.svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
	if err != nil || !resp.Refused() || resp.Granted != 0 {
		t.Fatalf("refused retry of a cancelled apply: %+v, %v; want the refusal", resp, err)
	}
}

// When the give-back itself fails, the row is not marked: the reservation
// is still USING in Redis, and a retry of the apply replays it (same start
// time) and keeps the row.
func TestRowIsNotMarkedWhenTheGiveBackFailed(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = func(r UsageRecord) error { e.led.put(r); return ErrUnavailable }
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrUnavailable }
	e.st.cancel = func(string, string) error { return ErrUnavailable }
	marked := false
	e.st.cancelRow = func(UsageRecord) error { marked = true; return nil }
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply: %v, want ErrUnavailable", err)
	}
	if n, idle := e.svc.PendingCancels(); n != 0 || idle != nil || marked {
		t.Fatalf("pending %d, drain %v, marked %v: want no mark", n, idle, marked)
	}
}

// Close stops the background marking while the ledger is unreachable (it
// would otherwise retry forever) and no mark starts after it.
func TestCloseStopsTheBackgroundMarks(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = func(r UsageRecord) error { return ErrUnavailable }
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrUnavailable }
	e.st.cancelRow = func(UsageRecord) error { return ErrUnavailable }
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply: %v", err)
	}
	n, idle := e.svc.PendingCancels()
	if n != 1 || idle == nil {
		t.Fatalf("pending %d, drain %v: want one mark being retried", n, idle)
	}
	e.svc.opt.CloseMarksWait = -1 // at once: TestCloseWaitsBoundedForThePendingMarks covers the wait
	e.svc.Close()
	select {
	case <-idle:
	default:
		t.Fatal("Close returned before the background marking ended")
	}
	if _, err := e.svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-2"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply after Close: %v", err)
	}
	if n, idle2 := e.svc.PendingCancels(); n != 1 || idle2 != idle {
		t.Fatalf("after Close: pending %d, a new drain %v: want none started", n, idle2 != idle)
	}
	e.svc.Close() // twice is fine
}
