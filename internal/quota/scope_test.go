package quota

import (
	"context"
	"errors"
	"testing"
)

// A scoped id is "resource/client/id"; the id its client knows is the part
// after the last '/', all of a bare id.
func TestPublicSessionIDOfAScopedID(t *testing.T) {
	scoped := ScopedSessionID("r", "c1", "s-1")
	if scoped != "r/c1/s-1" {
		t.Fatalf("scoped id %q", scoped)
	}
	for stored, want := range map[string]string{scoped: "s-1", "s-1": "s-1"} {
		if got := PublicSessionID(stored); got != want {
			t.Errorf("PublicSessionID(%q) = %q, want %q", stored, got, want)
		}
	}
}

// A finish by a client whose session is stored under the scoped id (the
// bare id is another's, or not in the store) settles that session and
// answers the id the client knows; a caller without a client id looks at
// the bare id only.
func TestFinishOfAScopedSession(t *testing.T) {
	scoped := ScopedSessionID("r", "c1", "s-1")
	var finished []string
	st := &stubs{finish: func(c FinishCmd) (FinishResult, error) {
		if c.SessionID != scoped {
			return FinishResult{}, ErrSessionNotFound
		}
		return FinishResult{ClientID: "c1", Granted: 5, Charged: 3, Refunded: 2, PeriodStart: testEpoch, StartTime: testEpoch, EndTime: testEpoch}, nil
	}}
	st.finishRow = func(r UsageRecord) error { finished = append(finished, r.SessionID); return nil }
	svc := newStubService(st, Options{})
	ctx := context.Background()
	resp, err := svc.Finish(ctx, FinishRequest{ResourceName: "r", SessionID: "s-1", ClientID: "c1", Actual: 3})
	if err != nil || resp.SessionID != "s-1" || resp.Charged != 3 || len(finished) != 1 || finished[0] != scoped {
		t.Fatalf("finish of the scoped session: %+v, %v; ledger rows finished %v", resp, err, finished)
	}
	if _, err := svc.Finish(ctx, FinishRequest{ResourceName: "r", SessionID: "s-1", Actual: 3}); !errors.Is(err, ErrSessionNotFound) || len(finished) != 1 {
		t.Fatalf("without a client id: %v, rows finished %v; want not found, the scoped session left", err, finished)
	}
}
