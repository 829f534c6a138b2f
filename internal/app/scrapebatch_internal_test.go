package app

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// fakeVisits says due the names in due (all when due is nil).
type fakeVisits struct {
	mu   sync.Mutex
	due  map[string]bool
	done []string
}

func (f *fakeVisits) Due(_ context.Context, names []string) ([]string, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range names {
		if f.due == nil || f.due[r] {
			out = append(out, r)
		}
	}
	return out, time.Unix(0, 0)
}

func (f *fakeVisits) Done(r string, _ time.Time, _ time.Duration) {
	f.mu.Lock()
	f.done = append(f.done, r)
	f.mu.Unlock()
}

// Prefetch reads the due resources in one batch; the Status calls that
// follow take its answers (none reads alone), one made while the batch is
// in flight waits for it, a failed read is answered to its Status and not
// kept, and resources not due since their last read are not read again.
func TestScrapeStatusPrefetchBatchesTheDueReads(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var singles int
	var batches [][]string
	entered, release := make(chan struct{}, 1), make(chan struct{})
	s := newScrapeStatus(func(_ context.Context, r string) (quota.StatusResponse, error) {
		mu.Lock()
		singles++
		mu.Unlock()
		return quota.StatusResponse{Used: 1}, nil
	})
	s.now = func() time.Time { return now }
	v := &fakeVisits{}
	s.visits = v
	s.readMany = func(_ context.Context, names []string) []quota.StatusResult {
		mu.Lock()
		batches = append(batches, slices.Clone(names))
		mu.Unlock()
		entered <- struct{}{}
		<-release
		out := make([]quota.StatusResult, len(names))
		for i, r := range names {
			if r == "bad" {
				out[i].Err = quota.ErrUnavailable
			} else {
				out[i].Status = quota.StatusResponse{Used: int64(10 + i)}
			}
		}
		return out
	}
	ctx := context.Background()
	names := []string{"a", "b", "bad"}
	go s.Prefetch(ctx, names)
	<-entered
	waited := make(chan quota.StatusResponse)
	go func() { st, _ := s.Status(ctx, "b"); waited <- st }() // while the batch is in flight
	close(release)
	if st := <-waited; st.Used != 11 {
		t.Fatalf("Status during the batch: %+v; want the batch's answer (11)", st)
	}
	for i, r := range names[:2] {
		if st, err := s.Status(ctx, r); err != nil || st.Used != int64(10+i) {
			t.Fatalf("Status %s: %+v, %v; want %d from the batch", r, st, err, 10+i)
		}
	}
	if singles != 0 || len(batches) != 1 || !slices.Equal(batches[0], names) {
		t.Fatalf("%d single reads, batches %v; want 0 and one batch of %v", singles, batches, names)
	}
	// The failed read was not kept: Status reads it alone.
	if _, err := s.Status(ctx, "bad"); err != nil || singles != 1 {
		t.Fatalf("Status bad after the batch: %v, %d single reads; want a read of its own", err, singles)
	}
	if !slices.Equal(v.done, []string{"a", "b", "bad"}) { // a, b by the batch, bad by its own read
		t.Fatalf("visits done %v; want a, b and bad's own read", v.done)
	}
	// The next scrape: only b changed.
	now = now.Add(scrapeStatusTTL)
	v.due = map[string]bool{"b": true}
	release2 := make(chan struct{})
	close(release2)
	go func() { <-entered }()
	s.Prefetch(ctx, names)
	if len(batches) != 2 || !slices.Equal(batches[1], []string{"b"}) {
		t.Fatalf("batches %v; want the second of b alone", batches)
	}
	if st, _ := s.Status(ctx, "a"); st.Used != 10 || singles != 1 {
		t.Fatalf("Status a (unchanged): %+v after %d single reads; want the kept 10, no read", st, singles)
	}
}

// A visitCache's reads right after its prefetch take the prefetch's
// answers even while the resources are still due (a change within
// activity.ClockSkew before the batch started counts as after it, so a
// resource in use stays due): before, each such get read its resource
// again one by one, and a scrape during a load read every resource twice.
func TestVisitCacheGetTakesThePrefetchOfItsScrape(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var singles, batches int
	c := newVisitCache(&fakeVisits{}, func(context.Context, string) (int, error) { singles++; return 1, nil }) // always due
	c.now = func() time.Time { return now }
	c.readMany = func(_ context.Context, names []string) ([]int, []error) {
		batches++
		out := make([]int, len(names))
		for i := range out {
			out[i] = 10 + i
		}
		return out, make([]error, len(names))
	}
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	c.prefetch(ctx, names)
	for i, r := range names {
		if v, err := c.get(ctx, r); err != nil || v != 10+i {
			t.Fatalf("get %s: %d, %v; want the batch's %d", r, v, err, 10+i)
		}
	}
	if singles != 0 || batches != 1 {
		t.Fatalf("%d single reads and %d batches; want 0 and 1", singles, batches)
	}
	now = now.Add(scrapeStatusTTL) // the next scrape, without a prefetch: due, read again
	if v, _ := c.get(ctx, "a"); v != 1 || singles != 1 {
		t.Fatalf("get a a scrape later: %d after %d single reads; want a read of its own", v, singles)
	}
}

// Refresh (the burn-rate sampler's reads) reads every name afresh in one
// batch, even one read for this scrape already, records each clean read as
// a visit, and the scrape's Prefetch and Status that follow take its
// answers while the resources are not due (no read of their own); a
// failed read is returned, not kept, and not recorded as a visit.
func TestScrapeStatusRefreshServesTheScrape(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var singles int
	var batches [][]string
	s := newScrapeStatus(func(_ context.Context, r string) (quota.StatusResponse, error) {
		singles++
		return quota.StatusResponse{Used: 1}, nil
	})
	s.now = func() time.Time { return now }
	v := &fakeVisits{due: map[string]bool{}} // nothing due unless said
	s.visits = v
	read := 0
	s.readMany = func(_ context.Context, names []string) []quota.StatusResult {
		batches = append(batches, slices.Clone(names))
		read++
		out := make([]quota.StatusResult, len(names))
		for i, r := range names {
			if r == "bad" {
				out[i].Err = quota.ErrUnavailable
			} else {
				out[i].Status = quota.StatusResponse{Used: int64(100*read + i)}
			}
		}
		return out
	}
	ctx := context.Background()
	names := []string{"a", "b", "bad"}
	res := s.Refresh(ctx, names)
	if len(batches) != 1 || !slices.Equal(batches[0], names) || res[0].Status.Used != 100 || res[1].Status.Used != 101 || res[2].Err == nil {
		t.Fatalf("Refresh: batches %v, results %+v; want one batch of %v, 100, 101 and bad's error", batches, res, names)
	}
	if !slices.Equal(v.done, []string{"a", "b"}) {
		t.Fatalf("visits done %v; want a and b (bad failed)", v.done)
	}
	now = now.Add(10 * time.Second) // the next scrape: a and b unchanged
	s.Prefetch(ctx, []string{"a", "b"})
	for i, r := range []string{"a", "b"} {
		if st, err := s.Status(ctx, r); err != nil || st.Used != int64(100+i) {
			t.Fatalf("Status %s after Refresh: %+v, %v; want the refresh's %d", r, st, err, 100+i)
		}
	}
	if len(batches) != 1 || singles != 0 {
		t.Fatalf("the scrape after Refresh read: batches %v, %d single reads; want none", batches, singles)
	}
	// Refresh reads again even what this scrape read a moment ago.
	if res := s.Refresh(ctx, []string{"a"}); len(batches) != 2 || res[0].Status.Used != 200 {
		t.Fatalf("a second Refresh: batches %v, result %+v; want a read of its own (200)", batches, res)
	}
}
