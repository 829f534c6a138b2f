package sweeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/sweeper"
)

type onePolicy struct{}

func (onePolicy) ListPolicies(context.Context) ([]quota.Policy, error) {
	return []quota.Policy{{ResourceName: "r"}}, nil
}

// refusingStore refuses every sweep as the scripts do when a give-back
// would leave a balance below zero.
type refusingStore struct{ sweeper.Store }

func (refusingStore) SweepHeld(context.Context, string, int, time.Duration, func([]string) (map[string]bool, error)) ([]quota.LeakedSession, []string, error) {
	return nil, nil, fmt.Errorf("redis sweep: %w: QCNEGATIVE sweep.lua: reserved 0 - 335", quota.ErrNegativeBalance)
}

// Issue 22 §1: a sweep the store refuses because a give-back would leave
// the balance below zero is not a silent clamp: it is counted apart
// (quota_sweep_negative_refused_total, and as a sweep error) and logged as
// an error.
func TestARefusedNegativeGiveBackIsCountedAndLoggedAsAnError(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	reg := prometheus.NewRegistry()
	s := sweeper.New(sweeper.Config{}, onePolicy{}, refusingStore{}, nil, zap.New(core), reg)
	if n := s.SweepOnce(context.Background()); n != 0 {
		t.Fatalf("swept %d", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				got[mf.GetName()] += c.GetValue()
			}
		}
	}
	if got["quota_sweep_negative_refused_total"] != 1 || got["quota_sweep_errors_total"] != 1 {
		t.Fatalf("counters %v: want one negative refusal, one error", got)
	}
	if e := logs.FilterLevelExact(zap.ErrorLevel).All(); len(e) != 1 {
		t.Fatalf("error logs %v: want one", logs.All())
	}
}
