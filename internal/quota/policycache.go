package quota

import (
	"context"
	"sync"
	"time"
)

// policyCache is the one per-instance cache of what apply, heartbeat,
// finish, charge and status read from MySQL: each resource's policy (the
// PolicyStore) and its pools (PoolConfig: the use an apply needs and the
// configuration its layout is cut from), each a staleCache
// (stalecache.go): reused for ttl, then served stale while a read in the
// background refreshes it, so these calls never wait on MySQL for a
// resource the instance has read before; a resource it has not read waits
// at most wait. With each policy it keeps the last period computed for it.
type policyCache struct {
	store PolicyStore
	pools PoolConfig // nil: no resource uses pools
	sched Scheduler
	mysql Breaker // in front of store and pools
	now   func() time.Time

	policies *staleCache[Policy]
	uses     *staleCache[poolView]

	mu   sync.Mutex
	pers map[string]memoPeriod // per resource
}

// memoPeriod is the last period computed for a policy.
type memoPeriod struct {
	p   Policy
	per Period
}

func newPolicyCache(store PolicyStore, pools PoolConfig, sched Scheduler, mysql Breaker, ttl, wait time.Duration, now func() time.Time) *policyCache {
	return &policyCache{
		store: store, pools: pools, sched: sched, mysql: mysql, now: now,
		policies: newStaleCache[Policy](ttl, wait, now),
		uses:     newStaleCache[poolView](ttl, wait, now),
		pers:     make(map[string]memoPeriod),
	}
}

// get returns a resource's policy (see staleCache.get). Errors:
// ErrResourceNotFound, ErrUnavailable, ErrCircuitOpen.
func (c *policyCache) get(ctx context.Context, resource string) (Policy, error) {
	if p, ok := c.policies.fresh(resource); ok {
		return p, nil // as get answers it, without making its read closure
	}
	return c.policies.get(ctx, resource, func(ctx context.Context) (Policy, error) { return c.read(ctx, resource) })
}

// poolsOf returns how a resource uses pools (see staleCache.get); the zero
// PoolUse without a PoolConfig. Errors: the PoolConfig's.
func (c *policyCache) poolsOf(ctx context.Context, resource string) (PoolUse, error) {
	if c.pools == nil {
		return PoolUse{}, nil
	}
	if v, ok := c.uses.fresh(resource); ok {
		return v.use, nil // as get answers it, without making its read closure
	}
	v, err := c.uses.get(ctx, resource, func(ctx context.Context) (poolView, error) {
		return readPools(ctx, c.pools, c.mysql, resource, c.now().UnixMilli())
	})
	return v.use, err
}

// read reads a policy from the store, through its breaker (uncached).
func (c *policyCache) read(ctx context.Context, resource string) (Policy, error) {
	return Guard(c.mysql, func() (Policy, error) { return c.store.GetPolicy(ctx, resource) })
}

// drop makes the next use of a resource's policy and pools read them again
// (after a change: a PUT here, or another instance's announcement); until
// that read answers the old ones are served only while the store is down.
func (c *policyCache) drop(resource string) {
	c.policies.invalidate(resource)
	c.uses.invalidate(resource)
	c.mu.Lock()
	delete(c.pers, resource)
	c.mu.Unlock()
}

// periodAt is sched.PeriodAt with the last answer per policy remembered:
// a cron period is computed once per period (tens of microseconds for some
// expressions), not once per request. The answer is remembered only while
// pol is the cached policy.
func (c *policyCache) periodAt(pol Policy, now time.Time) (Period, error) {
	c.mu.Lock()
	m, ok := c.pers[pol.ResourceName]
	c.mu.Unlock()
	if ok && m.p == pol && m.per.Contains(now) {
		return m.per, nil
	}
	per, err := c.sched.PeriodAt(pol, now)
	if err != nil {
		return per, err
	}
	if cur, ok := c.policies.peek(pol.ResourceName); ok && cur == pol {
		c.mu.Lock()
		c.pers[pol.ResourceName] = memoPeriod{p: pol, per: per}
		c.mu.Unlock()
	}
	return per, nil
}
