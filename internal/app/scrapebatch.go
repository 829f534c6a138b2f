package app

import (
	"context"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// A scrape's batch reads (issue 23 §1). A collector knows, before it reads
// anything, every resource it will read: it hands them to Prefetch, which
// reads the due ones (changed since their last read) in one batch — a
// few pipelines, not one round trip per resource — and keeps the answers;
// the collector's per-resource reads then take them. A per-resource read
// of a resource whose batch is in flight waits for the batch instead of
// reading again.

// batchFlight is one batch read in flight: its answers, once done is closed.
type batchFlight[T any] struct {
	done chan struct{}
	v    map[string]T
	err  map[string]error
}

// flights are the resources being read by batches, each with its batch.
// The zero value is ready; guarded by the owner's mutex.
type flights[T any] map[string]*batchFlight[T]

// claim makes a batch of the names no batch is reading, and returns it
// with those names.
func (f *flights[T]) claim(names []string) (*batchFlight[T], []string) {
	if *f == nil {
		*f = flights[T]{}
	}
	b := &batchFlight[T]{done: make(chan struct{}), v: map[string]T{}, err: map[string]error{}}
	var mine []string
	for _, r := range names {
		if _, busy := (*f)[r]; !busy {
			(*f)[r] = b
			mine = append(mine, r)
		}
	}
	return b, mine
}

// wait is resource's answer from batch b (ok false: ctx ended first).
func (b *batchFlight[T]) wait(ctx context.Context, resource string) (v T, err error, ok bool) {
	select {
	case <-b.done:
		return b.v[resource], b.err[resource], true
	case <-ctx.Done():
		return v, ctx.Err(), false
	}
}

// Prefetch reads, in one batch, the statuses of the resources of names
// that have no answer of this scrape and are due (changed since their
// last read, or unread), and keeps them for Status. Without readMany it
// does nothing. Errors are kept for the Status calls waiting on the batch
// (and are not reused after it).
func (s *scrapeStatus) Prefetch(ctx context.Context, names []string) {
	if s.readMany == nil || len(names) == 0 {
		return
	}
	now := s.now()
	s.mu.Lock()
	var want []string
	cached := map[string]bool{}
	for _, r := range names {
		if _, busy := s.flying[r]; busy {
			continue
		}
		a, ok := s.m[r]
		if ok && now.Sub(a.at) < scrapeStatusTTL {
			continue
		}
		cached[r] = ok
		want = append(want, r)
	}
	s.mu.Unlock()
	var start time.Time
	if s.visits != nil && len(want) > 0 {
		due, st := s.visits.Due(ctx, want)
		start = st
		isDue := make(map[string]bool, len(due))
		for _, r := range due {
			isDue[r] = true
		}
		read := want[:0]
		for _, r := range want {
			if isDue[r] || !cached[r] {
				read = append(read, r)
			}
		}
		want = read // the others: unchanged since read, Status reuses them
	}
	if len(want) == 0 {
		return
	}
	s.mu.Lock()
	b, mine := s.flying.claim(want)
	s.mu.Unlock()
	if len(mine) == 0 {
		return
	}
	res := s.readMany(ctx, mine)
	s.mu.Lock()
	for i, r := range mine {
		b.v[r], b.err[r] = res[i].Status, res[i].Err
		if res[i].Err == nil {
			s.m[r] = scrapeAnswer{st: res[i].Status, at: now, used: now}
		}
		delete(s.flying, r)
	}
	s.mu.Unlock()
	close(b.done)
	if s.visits != nil {
		for i, r := range mine {
			if res[i].Err == nil {
				s.visits.Done(r, start, periodLeft(res[i].Status, start))
			}
		}
	}
}

// periodLeft is how long from start the status st's period lasts (-1:
// it never ends), the next visit Done is told of.
func periodLeft(st quota.StatusResponse, start time.Time) time.Duration {
	if st.Period.End.IsZero() {
		return -1
	}
	return max(0, st.Period.End.Sub(start))
}

// prefetch reads, in one batch, the resources of names that are due and
// keeps them for get, as scrapeStatus.Prefetch does. Without readMany it
// does nothing.
func (c *visitCache[T]) prefetch(ctx context.Context, names []string) {
	if c.readMany == nil || len(names) == 0 {
		return
	}
	now := c.now()
	due, start := c.visits.Due(ctx, names)
	c.mu.Lock()
	var want []string
	for _, r := range due {
		if _, busy := c.flying[r]; !busy {
			want = append(want, r)
		}
	}
	// A resource not due but with nothing kept is read too (get would).
	isDue := make(map[string]bool, len(due))
	for _, r := range due {
		isDue[r] = true
	}
	for _, r := range names {
		if _, ok := c.m[r]; !ok && !isDue[r] {
			if _, busy := c.flying[r]; !busy {
				want = append(want, r)
			}
		}
	}
	b, mine := c.flying.claim(want)
	c.mu.Unlock()
	if len(mine) == 0 {
		return
	}
	vs, errs := c.readMany(ctx, mine)
	c.mu.Lock()
	for i, r := range mine {
		b.v[r], b.err[r] = vs[i], errs[i]
		if errs[i] == nil {
			c.m[r] = cachedRead[T]{v: vs[i], at: now, used: now}
		}
		delete(c.flying, r)
	}
	c.mu.Unlock()
	close(b.done)
	for i, r := range mine {
		if errs[i] == nil {
			c.visits.Done(r, start, -1)
		}
	}
}

// Refresh reads the statuses of names afresh, in one batch (readMany;
// one Status read each without it), keeps each answer for the scrape's
// Status and Prefetch as a read of their own (issue 23 §1: the burn-rate
// sampler's reads of the resources that changed, or are due their full
// visit, serve the next scrape, which then reads none of them again), and
// returns them, the i-th names[i]'s. Status calls for these resources
// meanwhile wait for it. Errors are returned and not kept.
func (s *scrapeStatus) Refresh(ctx context.Context, names []string) []quota.StatusResult {
	out := make([]quota.StatusResult, len(names))
	if len(names) == 0 {
		return out
	}
	start := s.now()
	s.mu.Lock()
	b, mine := s.flying.claim(names)
	s.mu.Unlock()
	var res []quota.StatusResult
	if s.readMany != nil {
		res = s.readMany(ctx, mine)
	} else {
		res = make([]quota.StatusResult, len(mine))
		for i, r := range mine {
			res[i].Status, res[i].Err = s.read(ctx, r)
		}
	}
	now := s.now()
	got := make(map[string]quota.StatusResult, len(mine))
	s.mu.Lock()
	for i, r := range mine {
		got[r] = res[i]
		b.v[r], b.err[r] = res[i].Status, res[i].Err
		if res[i].Err == nil {
			s.m[r] = scrapeAnswer{st: res[i].Status, at: start, used: now}
		}
		delete(s.flying, r)
	}
	s.mu.Unlock()
	close(b.done)
	if s.visits != nil {
		for _, r := range mine {
			if g := got[r]; g.Err == nil {
				s.visits.Done(r, start, periodLeft(g.Status, start))
			}
		}
	}
	for i, r := range names {
		if g, ok := got[r]; ok {
			out[i] = g
			continue
		}
		// Another batch was reading it (a scrape's prefetch, begun before
		// this call): a fresh read of its own, not that batch's answer.
		out[i].Status, out[i].Err = s.read(ctx, r)
	}
	return out
}
