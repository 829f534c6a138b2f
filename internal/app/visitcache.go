package app

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/quota"
)

// visitCache keeps the last read of each resource for a scrape-time
// collector (its pool status, its burn samples) and answers it again while
// the resource did not change since (activity.Visits: at most its full
// visit interval, 1 minute; issue 23 §1: a quiet used resource costs no
// Redis command per scrape). A read not asked for within scrapeKeep is
// dropped; errors are not kept. Safe for concurrent use.
type visitCache[T any] struct {
	visits scrapeVisits
	read   func(ctx context.Context, resource string) (T, error)
	now    func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	m     map[string]cachedRead[T]
	swept time.Time

	// readMany, when set, reads many resources in one batch (prefetch);
	// flying are the resources its batches are reading, guarded by mu.
	readMany func(ctx context.Context, resources []string) ([]T, []error)
	flying   flights[T]
}

type cachedRead[T any] struct {
	v    T
	at   time.Time // read
	used time.Time // last answered
}

func newVisitCache[T any](v scrapeVisits, read func(ctx context.Context, resource string) (T, error)) *visitCache[T] {
	return &visitCache[T]{visits: v, read: read, now: time.Now, m: map[string]cachedRead[T]{}}
}

// get answers resource's kept read when the resource is not due, and
// reads it (once for concurrent callers) otherwise. Errors: read's.
func (c *visitCache[T]) get(ctx context.Context, resource string) (T, error) {
	now := c.now()
	c.mu.Lock()
	if now.Sub(c.swept) >= scrapeStatusTTL {
		for r, a := range c.m {
			if now.Sub(a.used) >= scrapeKeep {
				delete(c.m, r)
			}
		}
		c.swept = now
	}
	a, ok := c.m[resource]
	b := c.flying[resource]
	c.mu.Unlock()
	if b != nil { // a prefetch is reading it
		v, err, _ := b.wait(ctx, resource)
		return v, err
	}
	if ok && now.Sub(a.at) < scrapeStatusTTL {
		return a.v, nil // read for this scrape (its prefetch), as scrapeStatus reuses it
	}
	due, start := c.visits.Due(ctx, []string{resource})
	if ok && len(due) == 0 {
		c.mu.Lock()
		a.used = now
		c.m[resource] = a
		c.mu.Unlock()
		return a.v, nil
	}
	v, err, _ := c.group.Do(resource, func() (any, error) {
		v, err := c.read(ctx, resource)
		if err == nil {
			c.mu.Lock()
			c.m[resource] = cachedRead[T]{v: v, at: now, used: now}
			c.mu.Unlock()
			c.visits.Done(resource, start, -1)
		}
		return v, err
	})
	return v.(T), err
}

// forget drops what is kept of resource (its policy or pools changed).
func (c *visitCache[T]) forget(resource string) {
	c.mu.Lock()
	delete(c.m, resource)
	c.mu.Unlock()
}

// poolReader is the pools' status read the pool gauges make
// (httpapi.PoolStatusReader).
type poolReader interface {
	Status(ctx context.Context, resource string) (admin.PoolStatus, bool, error)
}

// pooled is a resource's pool status and whether it has pools.
type pooled struct {
	st admin.PoolStatus
	ok bool
}

// scrapePools is the pool gauges' status read through a visitCache.
type scrapePools struct{ c *visitCache[pooled] }

// poolBatchReader reads many resources' pool statuses at once
// (admin.Pools.StatusOf: one query says which use pools, only those are
// read one by one).
type poolBatchReader interface {
	StatusOf(ctx context.Context, resources []string) ([]admin.PoolStatus, []bool, []error)
}

func newScrapePools(v scrapeVisits, p poolReader) scrapePools {
	c := newVisitCache(v, func(ctx context.Context, r string) (pooled, error) {
		st, ok, err := p.Status(ctx, r)
		return pooled{st, ok}, err
	})
	if b, ok := p.(poolBatchReader); ok {
		c.readMany = func(ctx context.Context, names []string) ([]pooled, []error) {
			sts, oks, errs := b.StatusOf(ctx, names)
			out := make([]pooled, len(names))
			for i := range names {
				out[i] = pooled{sts[i], oks[i]}
			}
			return out, errs
		}
	}
	return scrapePools{c}
}

// Prefetch reads the due resources of names in one batch for the Status
// calls that follow (httpapi.Prefetcher; issue 23 §1: each changed
// resource's lines, settings and grants were ~7 MySQL queries a scrape).
func (p scrapePools) Prefetch(ctx context.Context, names []string) { p.c.prefetch(ctx, names) }

// Status implements httpapi.PoolStatusReader.
func (p scrapePools) Status(ctx context.Context, resource string) (admin.PoolStatus, bool, error) {
	v, err := p.c.get(ctx, resource)
	return v.st, v.ok, err
}

// scrapeBurns is the forecast gauges' burn-sample read through a
// visitCache: the samples of the whole BurnWindow as of the read (a
// forecast made later ignores those that aged out of it).
type scrapeBurns struct {
	c *visitCache[[]quota.BurnSample]
}

func newScrapeBurns(v scrapeVisits, read func(ctx context.Context, r string, since time.Time) ([]quota.BurnSample, error)) scrapeBurns {
	return scrapeBurns{newVisitCache(v, func(ctx context.Context, r string) ([]quota.BurnSample, error) {
		return read(ctx, r, time.Now().Add(-admin.BurnWindow))
	})}
}

// BurnSamples answers the kept samples (admin.ForecastCollector.Samples;
// since is applied by the forecast's own age bounds).
func (b scrapeBurns) BurnSamples(ctx context.Context, resource string, _ time.Time) ([]quota.BurnSample, error) {
	return b.c.get(ctx, resource)
}

var _ httpapi.Prefetcher = scrapePools{}
