package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
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

// A heartbeat by a client whose session is stored under the scoped id
// renews that session and answers the id the client knows.
func TestHeartbeatOfAScopedSession(t *testing.T) {
	scoped := ScopedSessionID("r", "c1", "s-1")
	var renewed []string
	st := &stubs{heartbeat: func(_, id, _ string, _ time.Duration) (time.Time, error) {
		renewed = append(renewed, id)
		if id != scoped {
			return time.Time{}, ErrSessionNotFound
		}
		return testEpoch.Add(time.Minute), nil
	}}
	hb, err := newStubService(st, Options{}).Heartbeat(context.Background(), "r", "s-1", "c1")
	if err != nil || hb.SessionID != "s-1" || len(renewed) != 2 || renewed[1] != scoped {
		t.Fatalf("heartbeat: %+v, %v; renewed %v, want the bare id then the scoped one", hb, err, renewed)
	}
}

// An error names the id the client knows, not the stored scoped one, and
// keeps its chain; one about a bare id, or none, is returned as it is.
func TestPublicErrorNamesThePublicID(t *testing.T) {
	scoped := ScopedSessionID("r", "c1", "s-1")
	if err := publicError(nil, scoped, "s-1"); err != nil {
		t.Fatalf("no error became %v", err)
	}
	bare := fmt.Errorf("finish r: session s-1: %w", ErrSessionNotFound)
	if err := publicError(bare, "", "s-1"); err != bare { //nolint:errorlint // the very error, returned unchanged
		t.Fatalf("unscoped: %v", err)
	}
	if err := publicError(bare, "s-1", "s-1"); err != bare { //nolint:errorlint // the very error, returned unchanged
		t.Fatalf("stored bare: %v", err)
	}
	err := publicError(fmt.Errorf("finish r: session %s: %w", scoped, &NotActiveError{SessionID: scoped, Status: StatusFinished}), scoped, "s-1")
	var na *NotActiveError
	if err.Error() != "finish r: session s-1: "+(&NotActiveError{SessionID: "s-1", Status: StatusFinished}).Error() ||
		!errors.As(err, &na) || na.SessionID != "s-1" {
		t.Fatalf("scoped: %q (%+v)", err, na)
	}
}

// ownedBy: the row is the client's session on the resource.
func TestOwnedBy(t *testing.T) {
	row := UsageRecord{ResourceName: "r", ClientID: "c1"}
	if !ownedBy(row, "r", "c1") || ownedBy(row, "r", "c2") || ownedBy(row, "x", "c1") {
		t.Fatal("ownedBy: want the client's row on its resource only")
	}
}

// sessionOf reads the bare id's row when it is the client's (or when there
// is no scoped id), else the scoped id's; a failed read of the bare id is
// the answer.
func TestSessionOfReadsTheScopedRowOnlyForAnothersBareRow(t *testing.T) {
	scoped := ScopedSessionID("r", "c1", "s-1")
	cmd := ApplyCmd{ResourceName: "r", ClientID: "c1", SessionID: "s-1", OtherSessionID: scoped}
	for _, c := range []struct {
		name    string
		bare    UsageRecord
		bareErr error
		other   string // OtherSessionID
		want    string // the row's ClientID, or the error
	}{
		{"the client's bare row", UsageRecord{ResourceName: "r", ClientID: "c1"}, nil, scoped, "c1"},
		{"another's bare row", UsageRecord{ResourceName: "r", ClientID: "c2"}, nil, scoped, "scoped"},
		{"no bare row", UsageRecord{}, ErrSessionNotFound, scoped, "scoped"},
		{"bare row unreadable", UsageRecord{}, ErrUnavailable, scoped, ErrUnavailable.Error()},
		{"no scoped id", UsageRecord{ResourceName: "r", ClientID: "c2"}, nil, "", "c2"},
	} {
		st := &stubs{session: func(id string) (UsageRecord, error) {
			if id == scoped {
				return UsageRecord{ResourceName: "r", ClientID: "scoped"}, nil
			}
			return c.bare, c.bareErr
		}}
		cmd.OtherSessionID = c.other
		row, err := newStubService(st, Options{}).sessionOf(context.Background(), cmd)
		got := row.ClientID
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
