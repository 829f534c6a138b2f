package admin_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/quota"
)

// racingLedger is the ledger whose first Session read is followed at once
// by the client's own finish: the forced finish read the session USING and
// loses the race to the client.
type racingLedger struct {
	*mysqlstore.Store
	once   sync.Once
	finish func()
}

func (l *racingLedger) Session(ctx context.Context, id string) (quota.UsageRecord, error) {
	row, err := l.Store.Session(ctx, id)
	l.once.Do(l.finish)
	return row, err
}

// A forced finish that loses the race to the client's finish answers
// SESSION_NOT_ACTIVE with status FINISHED (as for a session found
// finished), not SESSION_CONFLICT, and audits nothing; the client's
// settlement stands.
func TestForceFinishThatLosesTheRaceIsNotActive(t *testing.T) {
	e := newPatchEnv(t)
	got, err := e.svc.Apply(ctx(t), quota.ApplyRequest{ResourceName: "p", ClientID: "c", SessionID: "s1", Amount: 100})
	if err != nil {
		t.Fatal(err)
	}
	_, audits := e.state(t)
	led := &racingLedger{Store: e.led, finish: func() {
		if _, err := e.svc.Finish(ctx(t), quota.FinishRequest{ResourceName: "p", ClientID: "c", SessionID: got.SessionID, Actual: 30}); err != nil {
			t.Error(err)
		}
	}}
	ops := admin.New(admin.Deps{Quota: e.svc, Ledger: led, Audit: e.led, Now: e.clk.Now})
	_, _, err = ops.ForceFinish(ctx(t), admin.FinishRequest{SessionID: "s1", ClientID: "c", ResourceName: "p", Reason: "stuck"})
	var na *quota.NotActiveError
	if !errors.As(err, &na) || na.Status != quota.StatusFinished || quota.CodeOf(err) != quota.CodeSessionNotActive {
		t.Fatalf("forced finish after the client's: %v (code %s); want SESSION_NOT_ACTIVE, status FINISHED", err, quota.CodeOf(err))
	}
	st, err := e.svc.Status(ctx(t), "p")
	if err != nil || st.Used != 30 || st.Reserved != 0 {
		t.Fatalf("status %+v, %v; want the client's 30 used, nothing reserved", st, err)
	}
	if _, n := e.state(t); n != audits {
		t.Fatalf("%d audit entries, was %d: the lost forced finish was audited", n, audits)
	}
}
