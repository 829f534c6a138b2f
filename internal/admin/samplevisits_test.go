package admin_test

import (
	"context"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// sampler is one quota service with its admin service on miniredis and
// SQLite, sampling with Visits (the change log of an activity tracker fed
// by the store) or every tick.
type sampler struct {
	svc *quota.Service
	ops *admin.Service
	mr  *miniredis.Miniredis
}

func newSampler(t *testing.T, clk *clock, visits bool) sampler {
	t.Helper()
	mr, rdb, led := backends(t)
	rs := redisstore.New(rdb)
	sched := &period.Scheduler{}
	svc := quota.NewService(rs, led, led, sched, quota.Options{Audit: led})
	d := admin.Deps{Quota: svc, Live: rs, Ledger: led, Audit: led, Sched: sched, Now: clk.Now}
	if visits {
		tr := activity.New(rdb, activity.Options{Now: clk.Now})
		rs.OnChange(tr.Mutated)
		d.SampleVisits = tr.NewVisits(activity.DefaultFullVisit)
	}
	if _, _, err := svc.PutPolicy(ctx(t), quota.Policy{ResourceName: "burn", QuotaType: quota.TypeTokens, TotalLimit: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	return sampler{svc: svc, ops: admin.New(d), mr: mr}
}

func (s sampler) samples(t *testing.T) int {
	t.Helper()
	n, err := s.mr.ZMembers("qc:{burn}:burn")
	if err != nil {
		return 0
	}
	return len(n)
}

// Randomized, against the sampler that reads every resource each tick:
// the sampler with Visits samples a resource only when it changed (or at
// its full visit), so a quiet resource gets no sample and no balance read
// between full visits; its forecasts stay close to the plain sampler's:
// the same when every tick changes the balance, 0 for both after a quiet
// spell, and within the span a full visit leaves otherwise.
func TestSamplingChangedResourcesOnlyKeepsTheForecast(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		clk := &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
		plain, skip := newSampler(t, clk, false), newSampler(t, clk, true)
		busy := func(n int64) {
			for _, s := range []sampler{plain, skip} {
				if _, err := s.svc.Apply(ctx(t), quota.ApplyRequest{ResourceName: "burn", Amount: n}); err != nil {
					t.Fatal(err)
				}
			}
		}
		tick := func() {
			sample(t, plain.ops)
			sample(t, skip.ops)
			clk.Add(admin.DefaultSampleInterval)
		}
		rate := func(s sampler) float64 {
			_, f, err := s.ops.Status(context.Background(), "burn")
			if err != nil {
				t.Fatal(err)
			}
			if f.BurnRate == nil {
				return -1
			}
			return *f.BurnRate
		}
		// Busy: a change every tick; both sample every tick.
		for range 30 {
			busy(1 + rng.Int63n(100))
			tick()
		}
		if p, s := rate(plain), rate(skip); p != s {
			t.Fatalf("seed %d, busy: rate %v with Visits, %v sampling every tick", seed, s, p)
		}
		// Quiet: no sample between full visits (1 minute, 6 ticks). The
		// first quiet tick may sample once more: the last change came in
		// the very ms the last visit started (this clock stands still).
		tick()
		before := skip.samples(t)
		for range 4 {
			tick()
		}
		if got := skip.samples(t); got != before {
			t.Fatalf("seed %d: %d samples written for a quiet resource within a minute, want 0", seed, got-before)
		}
		for range 30 { // 5 quiet minutes: the rate reads 0 on both
			tick()
		}
		if p, s := rate(plain), rate(skip); p != 0 || s != 0 {
			t.Fatalf("seed %d, after a quiet spell: rate %v with Visits, %v sampling every tick; want 0", seed, s, p)
		}
		// Sparse changes: the rate stays known (a sample at least every
		// full visit); it may differ from the plain sampler's, whose base
		// can be up to a full visit older (reported, not asserted).
		worst := 0.0
		for range 60 {
			if rng.Intn(4) == 0 {
				busy(1 + rng.Int63n(100))
			}
			tick()
			p, s := rate(plain), rate(skip)
			if p < 0 || s < 0 {
				t.Fatalf("seed %d: unknown rate (%v with Visits, %v sampling every tick)", seed, s, p)
			}
			if p > 0 {
				worst = max(worst, math.Abs(s-p)/p)
			}
		}
		t.Logf("seed %d: sparse changes, largest relative difference of the burn rate %.2f", seed, worst)
	}
}
