package app

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/quotacenter/quota-center/internal/quota"
)

// scrapeStatusTTL is how long a status read for a scrape is reused: the
// collectors of one scrape (the balance gauges, the forecasts) run
// concurrently within the scrape's 2 s bound, so within it they share one
// read of each resource; the next scrape (Prometheus: every 15 s or more)
// reads again.
const scrapeStatusTTL = time.Second

// scrapeStatus is quota.Service.Status shared by the scrape-time
// collectors: a resource's status read once per scrape, not once per
// collector (issue 23 §1: each read is balance.lua, 4 Redis commands).
// Concurrent reads of one resource share one call; an answer is reused for
// scrapeStatusTTL; errors are not kept. Safe for concurrent use.
type scrapeStatus struct {
	read func(ctx context.Context, resource string) (quota.StatusResponse, error)
	now  func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	m     map[string]scrapeAnswer
	swept time.Time

	// visits, when set, lets an answer be reused past scrapeStatusTTL
	// while its resource did not change (activity.Visits: up to its full
	// visit interval) and its period did not end (issue 23 §1: a quiet
	// used resource costs no Redis command per scrape).
	visits scrapeVisits

	// readMany, when set, reads many statuses in one batch (Prefetch;
	// quota.Service.Statuses); flying are the resources its batches are
	// reading, guarded by mu.
	readMany func(ctx context.Context, resources []string) []quota.StatusResult
	flying   flights[quota.StatusResponse]
}

// scrapeVisits is what scrapeStatus needs of activity.Visits.
type scrapeVisits interface {
	Due(ctx context.Context, names []string) ([]string, time.Time)
	Done(resource string, start time.Time, next time.Duration)
}

// scrapeKeep is how long an answer is kept for reuse with visits: a
// resource no scrape read for that long is forgotten.
const scrapeKeep = 5 * time.Minute

type scrapeAnswer struct {
	st   quota.StatusResponse
	at   time.Time // read
	used time.Time // last answered
}

func newScrapeStatus(read func(ctx context.Context, resource string) (quota.StatusResponse, error)) *scrapeStatus {
	return &scrapeStatus{read: read, now: time.Now, m: map[string]scrapeAnswer{}}
}

// Status is resource's status, read at most scrapeStatusTTL ago. Errors:
// read's.
func (s *scrapeStatus) Status(ctx context.Context, resource string) (quota.StatusResponse, error) {
	now := s.now()
	keep := scrapeStatusTTL
	if s.visits != nil {
		keep = scrapeKeep
	}
	s.mu.Lock()
	if now.Sub(s.swept) >= scrapeStatusTTL { // answers of resources no longer read go
		for r, a := range s.m {
			if now.Sub(a.used) >= keep {
				delete(s.m, r)
			}
		}
		s.swept = now
	}
	a, ok := s.m[resource]
	b := s.flying[resource]
	s.mu.Unlock()
	if ok && now.Sub(a.at) < scrapeStatusTTL {
		return a.st, nil
	}
	if b != nil { // a Prefetch is reading it
		st, err, _ := b.wait(ctx, resource)
		return st, err
	}
	var start time.Time
	if s.visits != nil {
		var due []string
		due, start = s.visits.Due(ctx, []string{resource})
		if ok && len(due) == 0 {
			s.mu.Lock()
			a.used = now
			s.m[resource] = a
			s.mu.Unlock()
			return a.st, nil // unchanged since it was read, same period
		}
	}
	v, err, _ := s.group.Do(resource, func() (any, error) {
		// A caller that missed the answer just before another's flight
		// stored it starts a flight of its own: it takes that answer.
		s.mu.Lock()
		a, ok := s.m[resource]
		s.mu.Unlock()
		if ok && now.Sub(a.at) < scrapeStatusTTL {
			return a.st, nil
		}
		st, err := s.read(ctx, resource)
		if err == nil {
			s.mu.Lock()
			s.m[resource] = scrapeAnswer{st: st, at: now, used: now}
			s.mu.Unlock()
			if s.visits != nil {
				s.visits.Done(resource, start, periodLeft(st, start))
			}
		}
		return st, err
	})
	return v.(quota.StatusResponse), err
}

// forget drops the answer kept for resource (its policy changed: the
// answer's Policy is stale).
func (s *scrapeStatus) forget(resource string) {
	s.mu.Lock()
	delete(s.m, resource)
	s.mu.Unlock()
}
