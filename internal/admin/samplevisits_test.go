package admin_test

import (
	"context"
	"errors"
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

func newSampler(t *testing.T, clk *clock, visits bool, opts ...func(*admin.Deps, *quota.Service)) sampler {
	t.Helper()
	mr, rdb, led := backends(t)
	rs := redisstore.New(rdb)
	sched := &period.Scheduler{}
	// No catch-up: the one after the first apply's rebuild runs on a real
	// 5 s timer (quota.Options.CatchUpAfter) and its CatchUp script is a
	// change (OnChange), at whatever fake time the test reached by then; on
	// a loaded machine that was inside the quiet window and the sampler
	// rightly sampled it (the "quiet resource" flake of seed 4).
	svc := quota.NewService(rs, led, led, sched, quota.Options{Audit: led, CatchUpAfter: -1})
	t.Cleanup(svc.Close)
	d := admin.Deps{Quota: svc, Live: rs, Ledger: led, Audit: led, Sched: sched, Now: clk.Now}
	if visits {
		tr := activity.New(rdb, activity.Options{Now: clk.Now})
		rs.OnChange(tr.Mutated)
		d.SampleVisits = tr.NewVisits(activity.MinuteVisit) // as serve's
	}
	for _, o := range opts {
		o(&d, svc)
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

// With Deps.SampleStatuses, a tick reads the statuses of the resources it
// samples in one call (quota-center serve: one batch of pipelines, kept
// for the scrape), not one Quota.Status each; a quiet tick reads none; the samples are those of the sampler reading one by one.
func TestSamplerReadsItsStatusesInOneBatch(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	var calls [][]string
	batch := newSampler(t, clk, true, func(d *admin.Deps, svc *quota.Service) {
		d.SampleStatuses = func(ctx context.Context, names []string) []quota.StatusResult {
			calls = append(calls, names)
			return svc.Statuses(ctx, names)
		}
		d.Quota = noStatus{d.Quota}
	})
	one := newSampler(t, clk, true)
	names := []string{"burn", "burn-2", "burn-3"}
	for _, s := range []sampler{batch, one} {
		for _, r := range names[1:] {
			if _, _, err := s.svc.PutPolicy(ctx(t), quota.Policy{ResourceName: r, QuotaType: quota.TypeTokens, TotalLimit: 1 << 40}); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply := func(r string, n int64) {
		for _, s := range []sampler{batch, one} {
			if _, err := s.svc.Apply(ctx(t), quota.ApplyRequest{ResourceName: r, Amount: n}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick := func() {
		sample(t, batch.ops)
		sample(t, one.ops)
		clk.Add(admin.DefaultSampleInterval)
	}
	for _, r := range names {
		apply(r, 5)
	}
	tick()
	if len(calls) != 1 || len(calls[0]) != 3 {
		t.Fatalf("first tick: status reads %v, want one batch of the 3 resources", calls)
	}
	tick() // may read them once more: changed in the ms the last visit started
	n := len(calls)
	tick()
	if len(calls) != n {
		t.Fatalf("a quiet tick read statuses: %v", calls[n:])
	}
	apply("burn-2", 7)
	tick()
	if len(calls) != n+1 || len(calls[n]) != 1 || calls[n][0] != "burn-2" {
		t.Fatalf("after a change of burn-2: status reads %v, want one batch of burn-2 alone", calls[n:])
	}
	if b, o := batch.samples(t), one.samples(t); b != o || b == 0 {
		t.Fatalf("%d samples of burn with the batch, %d one by one", b, o)
	}
}

// noStatus is a Quota whose Status fails the test's sampler: it must read
// through Deps.SampleStatuses.
type noStatus struct{ admin.Quota }

func (noStatus) Status(context.Context, string) (quota.StatusResponse, error) {
	return quota.StatusResponse{}, errors.New("Quota.Status called: the sampler should read in one batch")
}

// A quiet resource's full visit (each minute) writes one sample: the held
// value (the last tick that found it unchanged) is the new sample's own and
// is not written too; after a change it is (the forecast's base).
func TestQuietFullVisitWritesOneSample(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	s := newSampler(t, clk, true)
	tick := func() {
		sample(t, s.ops)
		clk.Add(admin.DefaultSampleInterval)
	}
	if _, err := s.svc.Apply(ctx(t), quota.ApplyRequest{ResourceName: "burn", Amount: 3}); err != nil {
		t.Fatal(err)
	}
	tick()
	tick() // may sample once more (changed in the ms of the last visit)
	before := s.samples(t)
	for range 6 { // a minute: one full visit
		tick()
	}
	if got := s.samples(t) - before; got != 1 {
		t.Fatalf("a quiet minute wrote %d samples, want 1 (the full visit's)", got)
	}
	tick()
	before = s.samples(t)
	if _, err := s.svc.Apply(ctx(t), quota.ApplyRequest{ResourceName: "burn", Amount: 4}); err != nil {
		t.Fatal(err)
	}
	tick()
	if got := s.samples(t) - before; got != 2 {
		t.Fatalf("a change after quiet ticks wrote %d samples, want 2 (the held value and the new one)", got)
	}
}
