package quota

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// CancelPending names the sessions whose CANCELLED mark is still to be
// made (the sweeper must not charge them: docs/reliability.md G1), and
// forgets each once its mark is made.
func TestCancelPendingUntilTheMarkIsMade(t *testing.T) {
	e := newRecordEnv(t, ApplyGranted, FailClosed)
	e.st.insert = func(UsageRecord) error { return ErrUnavailable }
	e.st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrUnavailable }
	var ledgerBack atomic.Bool
	e.st.cancelRow = func(UsageRecord) error {
		if !ledgerBack.Load() {
			return ErrUnavailable
		}
		return nil
	}
	if _, err := e.apply(t); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply: %v", err)
	}
	if !e.svc.CancelPending("s-1") || e.svc.CancelPending("s-2") {
		t.Fatalf("pending: s-1 %v, s-2 %v; want s-1 only", e.svc.CancelPending("s-1"), e.svc.CancelPending("s-2"))
	}
	_, idle := e.svc.PendingCancels()
	ledgerBack.Store(true)
	select {
	case <-idle:
	case <-time.After(30 * time.Second):
		t.Fatal("the CANCELLED mark was not made once the ledger answered")
	}
	if e.svc.CancelPending("s-1") {
		t.Fatal("s-1 still pending after its mark was made")
	}
}
