package quota

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// policyCache keeps the policies read from the PolicyStore for ttl, and
// with each the last period computed for it. It has its own lock. Concurrent
// misses of one resource share one read (singleflight): a cold cache under
// load sends one query to the store, not one per request.
type policyCache struct {
	store PolicyStore
	sched Scheduler
	mysql Breaker // in front of store
	ttl   time.Duration
	now   func() time.Time

	mu      sync.RWMutex
	entries map[string]cachedPolicy
	loads   singleflight.Group // per resource
}

type cachedPolicy struct {
	p       Policy
	expires time.Time
	per     Period // the last period computed for p; zero until then
}

func newPolicyCache(store PolicyStore, sched Scheduler, mysql Breaker, ttl time.Duration, now func() time.Time) *policyCache {
	return &policyCache{store: store, sched: sched, mysql: mysql, ttl: ttl, now: now, entries: make(map[string]cachedPolicy)}
}

// get returns a resource's policy, from the cache while it is fresh; while
// the store is unavailable an expired entry is still used. Errors:
// ErrResourceNotFound, ErrUnavailable, ErrCircuitOpen.
func (c *policyCache) get(ctx context.Context, resource string) (Policy, error) {
	if p, fresh, ok := c.cached(resource); ok && fresh {
		return p, nil
	}
	_, err, _ := c.loads.Do(resource, func() (any, error) {
		// Shared by every waiter: not bound to the first caller's
		// cancellation (the store's query timeout bounds it).
		p, err := c.read(context.WithoutCancel(ctx), resource)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.entries[resource] = cachedPolicy{p: p, expires: c.now().Add(c.ttl)}
		c.mu.Unlock()
		return nil, nil
	})
	p, _, ok := c.cached(resource)
	switch {
	case err == nil && ok:
		return p, nil
	case err != nil && ok && isBackendFailure(err):
		// Stale beats unknown while MySQL is down: limits live in Redis,
		// and a fail-open policy must still be known to fail open.
		return p, nil
	case err == nil:
		// A PUT dropped the entry just after the load: read it again.
		return c.read(ctx, resource)
	}
	return Policy{}, err
}

// read reads a policy from the store, through its breaker.
func (c *policyCache) read(ctx context.Context, resource string) (Policy, error) {
	return Guard(c.mysql, func() (Policy, error) { return c.store.GetPolicy(ctx, resource) })
}

// cached returns the cached policy, whether it is still fresh, and whether
// there is one at all.
func (c *policyCache) cached(resource string) (Policy, bool, bool) {
	c.mu.RLock()
	e, ok := c.entries[resource]
	c.mu.RUnlock()
	return e.p, ok && c.now().Before(e.expires), ok
}

// drop forgets a resource's policy (after a PUT).
func (c *policyCache) drop(resource string) {
	c.mu.Lock()
	delete(c.entries, resource)
	c.mu.Unlock()
}

// periodAt is sched.PeriodAt with the last answer per policy remembered:
// a cron period is computed once per period (tens of microseconds for some
// expressions), not once per request. The answer is remembered only while
// pol is the cached policy.
func (c *policyCache) periodAt(pol Policy, now time.Time) (Period, error) {
	c.mu.RLock()
	e, ok := c.entries[pol.ResourceName]
	c.mu.RUnlock()
	if ok && e.p == pol && !e.per.Start.IsZero() && e.per.Contains(now) {
		return e.per, nil
	}
	per, err := c.sched.PeriodAt(pol, now)
	if err != nil {
		return per, err
	}
	c.mu.Lock()
	if e, ok := c.entries[pol.ResourceName]; ok && e.p == pol {
		e.per = per
		c.entries[pol.ResourceName] = e
	}
	c.mu.Unlock()
	return per, nil
}
