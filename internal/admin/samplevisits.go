package admin

import (
	"context"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Visits is what the burn-rate sampler needs of activity.Visits (Deps.SampleVisits).
type Visits interface {
	// Due returns the resources of names to sample now and the start to
	// pass to Done.
	Due(ctx context.Context, names []string) ([]string, time.Time)
	// Done records a clean sample of resource begun at start; next ≥ 0:
	// sample it again after next (its period ends) even without a change.
	Done(resource string, start time.Time, next time.Duration)
}

// sampleMemo is what the sampler remembers of each sampled resource: the
// consumption of its last sample, its period, and the last tick that found
// it unchanged. Safe for concurrent use.
type sampleMemo struct {
	mu sync.Mutex
	m  map[string]lastSample
}

type lastSample struct {
	consumed int64
	period   time.Time // the sample's period start
	at       time.Time // when it was taken
	held     time.Time // the last tick that found the resource unchanged since (zero: none)
}

// sampleChanged records one sample of every resource of pols that
// Deps.SampleVisits says changed since its last sample (or whose period
// ended, or that is due for its full visit), and none of the others: their
// consumption is the last sample's, and the forecast's base needs no new
// one (a resource is due at least every full-visit interval, 1 minute by
// default, well within BurnWindow less MinBurnSpan). When a resource that
// was found unchanged changes, the sampler first writes the value it held
// until the last tick that found it unchanged, so that the forecast's base
// at any age is the consumption at that age, as if every tick had sampled.
// It returns the first error and goes on with the other resources.
func (s *Service) sampleChanged(ctx context.Context, pols []quota.Policy) error {
	names := make([]string, len(pols))
	for i, p := range pols {
		names[i] = p.ResourceName
	}
	due, start := s.d.SampleVisits.Due(ctx, names)
	isDue := make(map[string]bool, len(due))
	for _, r := range due {
		isDue[r] = true
	}
	now := s.now()
	s.memo.mu.Lock()
	if s.memo.m == nil {
		s.memo.m = map[string]lastSample{}
	}
	keep := make(map[string]lastSample, len(pols))
	for _, r := range names {
		if l, ok := s.memo.m[r]; ok {
			if !isDue[r] {
				l.held = now
			}
			keep[r] = l
		}
	}
	s.memo.m = keep   // resources no longer sampled are forgotten
	var read []string // due, or never sampled
	for _, r := range names {
		if _, ok := s.memo.m[r]; isDue[r] || !ok {
			read = append(read, r)
		}
	}
	s.memo.mu.Unlock()
	sts := s.statuses(ctx, read)
	var first error
	for i, r := range read {
		s.memo.mu.Lock()
		last, ok := s.memo.m[r]
		s.memo.mu.Unlock()
		if err := s.sampleOne(ctx, r, sts[i], last, ok, start, now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// statuses reads the statuses of resources: through Deps.SampleStatuses
// (one batch) when set, else Quota.Status of each.
func (s *Service) statuses(ctx context.Context, resources []string) []quota.StatusResult {
	if len(resources) == 0 {
		return nil
	}
	if s.d.SampleStatuses != nil {
		return s.d.SampleStatuses(ctx, resources)
	}
	out := make([]quota.StatusResult, len(resources))
	for i, r := range resources {
		out[i].Status, out[i].Err = s.d.Quota.Status(ctx, r)
	}
	return out
}

// sampleOne records resource's sample from its status read res (after the
// held value of last, when last is known and was found unchanged since),
// then tells SampleVisits. A failure (of the read or the write) forgets
// last: the next tick samples the resource again.
func (s *Service) sampleOne(ctx context.Context, r string, res quota.StatusResult, last lastSample, known bool, start, now time.Time) error {
	forget := func() {
		s.memo.mu.Lock()
		delete(s.memo.m, r)
		s.memo.mu.Unlock()
	}
	st, err := res.Status, res.Err
	if err != nil {
		forget()
		return err
	}
	ttl := BurnWindow + time.Minute
	// The held value, unless it is the new sample's own (a full visit that
	// found nothing changed: the new sample says the same from last.at on).
	if known && last.held.After(last.at) && last.period.Equal(st.Period.Start) && last.consumed != st.Used+st.Reserved {
		err = s.d.Live.RecordBurn(ctx, r, quota.BurnSample{At: last.held, PeriodStart: last.period, Consumed: last.consumed}, ttl)
	}
	if err == nil {
		err = s.d.Live.RecordBurn(ctx, r, quota.BurnSample{At: now, PeriodStart: st.Period.Start, Consumed: st.Used + st.Reserved}, ttl)
	}
	if err != nil {
		forget()
		return err
	}
	s.memo.mu.Lock()
	s.memo.m[r] = lastSample{consumed: st.Used + st.Reserved, period: st.Period.Start, at: now}
	s.memo.mu.Unlock()
	next := time.Duration(-1)
	if !st.Period.End.IsZero() {
		next = max(0, st.Period.End.Sub(start))
	}
	s.d.SampleVisits.Done(r, start, next)
	return nil
}
