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
}

type scrapeAnswer struct {
	st quota.StatusResponse
	at time.Time
}

func newScrapeStatus(read func(ctx context.Context, resource string) (quota.StatusResponse, error)) *scrapeStatus {
	return &scrapeStatus{read: read, now: time.Now, m: map[string]scrapeAnswer{}}
}

// Status is resource's status, read at most scrapeStatusTTL ago. Errors:
// read's.
func (s *scrapeStatus) Status(ctx context.Context, resource string) (quota.StatusResponse, error) {
	now := s.now()
	s.mu.Lock()
	if now.Sub(s.swept) >= scrapeStatusTTL { // answers of resources no longer read go
		for r, a := range s.m {
			if now.Sub(a.at) >= scrapeStatusTTL {
				delete(s.m, r)
			}
		}
		s.swept = now
	}
	a, ok := s.m[resource]
	s.mu.Unlock()
	if ok && now.Sub(a.at) < scrapeStatusTTL {
		return a.st, nil
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
			s.m[resource] = scrapeAnswer{st: st, at: now}
			s.mu.Unlock()
		}
		return st, err
	})
	return v.(quota.StatusResponse), err
}
