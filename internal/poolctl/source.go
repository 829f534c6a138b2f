package poolctl

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Source tells the quota Service which resources use pools
// (quota.PoolSource), from the policy store, each answer reused for TTL
// (changes made through this instance's Admin are seen at once). While the
// policy store is unreachable (quota.ErrUnavailable, quota.ErrCircuitOpen)
// the last answer read for a resource is served however old, as the policy
// cache serves a stale policy (docs/design.md §8): an apply then still
// goes to Redis, which counts it live. A resource never read since the
// instance started has no answer to serve: its lookup fails.
type Source struct {
	admin *Admin
	ttl   time.Duration

	mu    sync.Mutex
	cache map[string]cachedUse
}

type cachedUse struct {
	use   quota.PoolUse
	at    time.Time
	stale bool // forgotten: read again, serve only while the store is down
}

var _ quota.PoolSource = (*Source)(nil)

// NewSource returns the Service's view of the pools; ttl ≤ 0 means 2 s.
func NewSource(a *Admin, ttl time.Duration) *Source {
	if ttl <= 0 {
		ttl = 2 * time.Second
	}
	src := &Source{admin: a, ttl: ttl, cache: map[string]cachedUse{}}
	a.onChange = src.forget
	return src
}

// OnChange adds f to what is told, after this source forgets it, of every
// change the Admin makes to a resource's lines, pools settings or grants:
// the Service's policy cache (quota.Service.ForgetPolicy), which keeps
// what PoolsOf answered and would otherwise serve it stale until its own
// TTL ran out. Not safe to call while the Admin is in use.
func (s *Source) OnChange(f func(resource string)) {
	prev := s.admin.onChange
	s.admin.onChange = func(resource string) {
		prev(resource)
		f(resource)
	}
}

// Forget drops what the source cached of resource (its lines and grants),
// so that its next apply reads them again: called when another instance
// announces a change (internal/policysync).
func (s *Source) Forget(resource string) { s.forget(resource) }

// forget expires the entry rather than dropping it: the next lookup reads
// the store, and the old answer is still there for it if the store is down.
func (s *Source) forget(resource string) {
	s.mu.Lock()
	if c, ok := s.cache[resource]; ok {
		c.stale = true
		s.cache[resource] = c
	}
	s.mu.Unlock()
}

// PoolsOf implements quota.PoolSource: the cached answer while it is
// fresh, else the policy store's; the cached answer however old when the
// store is unreachable. Errors: the store's, when nothing is cached.
func (s *Source) PoolsOf(ctx context.Context, resource string) (quota.PoolUse, error) {
	now := s.admin.now()
	s.mu.Lock()
	c, ok := s.cache[resource]
	s.mu.Unlock()
	if ok && !c.stale && now.Sub(c.at) < s.ttl {
		return c.use, nil
	}
	use, err := s.read(ctx, resource, now)
	if err != nil && ok && (errors.Is(err, quota.ErrUnavailable) || errors.Is(err, quota.ErrCircuitOpen)) {
		return c.use, nil // stale beats unknown: Redis still decides
	}
	return use, err
}

// read reads a resource's PoolUse from the policy store and caches it.
func (s *Source) read(ctx context.Context, resource string, now time.Time) (quota.PoolUse, error) {
	lines, err := s.admin.lines.Lines(ctx, resource)
	if err != nil {
		return quota.PoolUse{}, err
	}
	gs, err := s.admin.grants.Grants(ctx, resource, now.UnixMilli())
	if err != nil {
		return quota.PoolUse{}, err
	}
	use := quota.PoolUse{}
	if len(lines) > 0 {
		use.Lines = make(map[string]pools.Tier, len(lines))
		for _, l := range lines {
			use.Lines[l.Name] = l.Tier
		}
	}
	for _, g := range gs {
		if g.Kind == pools.KindGrant && !g.Voided {
			use.Grants = true
		}
	}
	if use.Version, err = s.version(ctx, resource, lines, gs, now.UnixMilli()); err != nil {
		return quota.PoolUse{}, err
	}
	s.mu.Lock()
	s.cache[resource] = cachedUse{use: use, at: now}
	s.mu.Unlock()
	return use, nil
}

// Relayout implements quota.PoolSource: the layout (Admin.Relayout), then
// the grants when Redis lost them (Admin.RestoreGrants).
func (s *Source) Relayout(ctx context.Context, resource string) error {
	if err := s.admin.Relayout(ctx, resource); err != nil {
		return err
	}
	return s.admin.RestoreGrants(ctx, resource)
}

// version is PoolUse.Version: a hash of the lines, the pool settings (when
// there are lines) and the grants and releases in force at now (ms), by id.
func (s *Source) version(ctx context.Context, resource string, lines []pools.LineSpec, gs []pools.GrantRecord, now int64) (string, error) {
	h := fnv.New64a()
	for _, l := range lines {
		fmt.Fprintf(h, "l %s %s %d %d\n", l.Name, l.Tier, l.Weight, l.Dedicated)
	}
	if len(lines) > 0 {
		set, _, err := s.admin.lines.PoolSettings(ctx, resource)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "s %+v\n", set)
	}
	n := 0
	for _, g := range gs {
		if g.Active(now) {
			fmt.Fprintf(h, "g %s %d\n", g.ID, g.Amount)
			n++
		}
	}
	if len(lines) == 0 && n == 0 {
		return "", nil
	}
	return strconv.FormatUint(h.Sum64(), 36), nil
}

// CheckLimit implements quota.PoolSource (Admin.CheckLayout with the
// stored settings).
func (s *Source) CheckLimit(ctx context.Context, resource string, limit int64) error {
	return s.admin.CheckLayout(ctx, resource, limit, nil)
}
