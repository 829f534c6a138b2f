package sweeper_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/sweeper"
)

type threePolicies struct{}

func (threePolicies) ListPolicies(context.Context) ([]quota.Policy, error) {
	return []quota.Policy{{ResourceName: "quiet"}, {ResourceName: "leased"}, {ResourceName: "failing"}}, nil
}

// timedStore answers every sweep with nothing expired, the time until the
// earliest running lease ends ("leased": 30 s, others none), and an error
// for "failing".
type timedStore struct {
	sweeper.Store
	calls []string
}

func (s *timedStore) SweepHeldNext(_ context.Context, r string, _ int, _ time.Duration, _ func([]string) (map[string]bool, error)) ([]quota.LeakedSession, []string, time.Duration, error) {
	s.calls = append(s.calls, r)
	switch r {
	case "leased":
		return nil, nil, 30 * time.Second, nil
	case "failing":
		return nil, nil, -1, errors.New("redis down")
	}
	return nil, nil, -1, nil
}

// visitLog records what the sweeper tells its Visits; every name is due.
type visitLog struct{ done map[string]time.Duration }

func (v *visitLog) Due(_ context.Context, names []string) ([]string, time.Time) {
	return names, time.Unix(1000, 0)
}

func (v *visitLog) Done(r string, _ time.Time, next time.Duration) { v.done[r] = next }

// With Visits, a sweep that found nothing and failed nowhere is recorded
// with the time until the earliest running lease ends (the resource may
// be skipped until then or a change); a failed sweep is not recorded (the
// resource stays due); only the resources Due names are swept.
func TestSweeperRecordsCleanVisitsWithTheirLeaseTimes(t *testing.T) {
	st, v := &timedStore{}, &visitLog{done: map[string]time.Duration{}}
	s := sweeper.New(sweeper.Config{Visits: v}, threePolicies{}, st, nil, zap.NewNop(), prometheus.NewRegistry())
	s.SweepOnce(context.Background())
	if !slices.Equal(st.calls, []string{"quiet", "leased", "failing"}) {
		t.Fatalf("swept %v", st.calls)
	}
	if len(v.done) != 2 || v.done["quiet"] != -1 || v.done["leased"] != 30*time.Second {
		t.Fatalf("visits recorded %v: want quiet (no time) and leased (30 s), not failing", v.done)
	}
}

// skipAll says no resource is due.
type skipAll struct{ visitLog }

func (skipAll) Due(context.Context, []string) ([]string, time.Time) { return nil, time.Unix(1000, 0) }

func TestSweeperSweepsOnlyDueResources(t *testing.T) {
	st := &timedStore{}
	s := sweeper.New(sweeper.Config{Visits: &skipAll{}}, threePolicies{}, st, nil, zap.NewNop(), prometheus.NewRegistry())
	s.SweepOnce(context.Background())
	if len(st.calls) != 0 {
		t.Fatalf("swept %v, want none (none due)", st.calls)
	}
}
