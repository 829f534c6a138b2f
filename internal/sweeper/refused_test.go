package sweeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/sweeper"
)

// askingStore has two expired sessions and reports what the sweeper's held
// check said of them (SweepHeld charges only the held ones).
type askingStore struct {
	sweeper.Store
	said map[string]bool
}

func (a *askingStore) SweepHeld(_ context.Context, _ string, _ int, _ time.Duration, held func([]string) (map[string]bool, error)) ([]quota.LeakedSession, []string, error) {
	m, err := held([]string{"refused", "live"})
	a.said = m
	return nil, nil, err
}

func (a *askingStore) Sessions(context.Context, string, []string) (map[string]quota.SessionState, error) {
	return map[string]quota.SessionState{}, nil
}

// usingRows: both sessions' ledger rows still read USING.
type usingRows struct{ sweeper.Ledger }

func (usingRows) SessionsByID(_ context.Context, ids []string) (map[string]quota.UsageRecord, error) {
	out := map[string]quota.UsageRecord{}
	for _, id := range ids {
		out[id] = quota.UsageRecord{SessionID: id, ResourceName: "r", Status: quota.StatusUsing}
	}
	return out, nil
}

// G1 (docs/reliability.md): an apply answered 503 whose row landed reads
// USING until the instance's background mark makes it CANCELLED; a rebuild
// after Redis lost the tombstone brings the session back, and a sweep in
// that window charged the 503'd apply as LEAKED (CI saw
// TestRefusedApplyStaysUnchargedWhenRedisLosesItsTombstone fail so). A
// session whose CANCELLED mark is pending on this instance is not held.
func TestASessionWithAPendingCancelMarkIsNotCharged(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused func(string) bool
		want    map[string]bool
	}{
		{"with the hook", func(id string) bool { return id == "refused" }, map[string]bool{"refused": false, "live": true}},
		{"without it", nil, map[string]bool{"refused": true, "live": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &askingStore{}
			s := sweeper.New(sweeper.Config{Refused: tc.refused}, onePolicy{}, st, usingRows{}, zap.NewNop(), prometheus.NewRegistry())
			s.SweepOnce(context.Background())
			for id, want := range tc.want {
				if got, ok := st.said[id]; !ok || got != want {
					t.Fatalf("held(%s) = %v (%v), want %v; all: %v", id, got, ok, want, st.said)
				}
			}
		})
	}
}
