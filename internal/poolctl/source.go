package poolctl

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// ledgerTotals is the ledger's part of rebuilding pool counters.
type ledgerTotals interface {
	PoolTotals(ctx context.Context, resource string, periodStart time.Time) (pools.Totals, error)
}

// counterSeeder is the balance store's part of rebuilding pool counters.
type counterSeeder interface {
	SeedPools(ctx context.Context, resource string, per quota.Period, c pools.Totals) (bool, error)
}

// Source tells the quota Service which resources use pools
// (quota.PoolSource), from the policy store, each answer reused for TTL
// (changes made through this instance's Admin are seen at once).
type Source struct {
	admin  *Admin
	ledger ledgerTotals
	seeder counterSeeder
	ttl    time.Duration

	mu    sync.Mutex
	cache map[string]cachedUse
}

type cachedUse struct {
	use quota.PoolUse
	at  time.Time
}

var _ quota.PoolSource = (*Source)(nil)

// NewSource returns the Service's view of the pools; ttl ≤ 0 means 2 s.
func NewSource(a *Admin, l ledgerTotals, s counterSeeder, ttl time.Duration) *Source {
	if ttl <= 0 {
		ttl = 2 * time.Second
	}
	src := &Source{admin: a, ledger: l, seeder: s, ttl: ttl, cache: map[string]cachedUse{}}
	a.onChange = src.forget
	return src
}

// Forget drops what the source cached of resource (its lines and grants),
// so that its next apply reads them again: called when another instance
// announces a change (internal/policysync).
func (s *Source) Forget(resource string) { s.forget(resource) }

func (s *Source) forget(resource string) {
	s.mu.Lock()
	delete(s.cache, resource)
	s.mu.Unlock()
}

// PoolsOf implements quota.PoolSource.
func (s *Source) PoolsOf(ctx context.Context, resource string) (quota.PoolUse, error) {
	now := s.admin.now()
	s.mu.Lock()
	c, ok := s.cache[resource]
	s.mu.Unlock()
	if ok && now.Sub(c.at) < s.ttl {
		return c.use, nil
	}
	lines, err := s.admin.cfg.Lines(ctx, resource)
	if err != nil {
		return quota.PoolUse{}, err
	}
	gs, err := s.admin.cfg.Grants(ctx, resource, now.UnixMilli())
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

// Relayout implements quota.PoolSource.
func (s *Source) Relayout(ctx context.Context, resource string) error {
	return s.admin.Relayout(ctx, resource)
}

// SeedPools implements quota.PoolSource: the period's counters from the
// ledger's drawn columns (mysqlstore.PoolTotals), written if absent.
// The resource's grants come back first (Admin.RestoreGrants), when Redis
// lost them too.
func (s *Source) SeedPools(ctx context.Context, resource string, per quota.Period) error {
	if err := s.admin.RestoreGrants(ctx, resource); err != nil {
		return err
	}
	t, err := s.ledger.PoolTotals(ctx, resource, per.Start)
	if err != nil {
		return err
	}
	_, err = s.seeder.SeedPools(ctx, resource, per, t)
	return err
}

// version is PoolUse.Version: a hash of the lines, the pool settings (when
// there are lines) and the grants and releases in force at now (ms), by id.
func (s *Source) version(ctx context.Context, resource string, lines []pools.LineSpec, gs []pools.GrantRecord, now int64) (string, error) {
	h := fnv.New64a()
	for _, l := range lines {
		fmt.Fprintf(h, "l %s %s %d %d\n", l.Name, l.Tier, l.Weight, l.Dedicated)
	}
	if len(lines) > 0 {
		set, _, err := s.admin.cfg.PoolSettings(ctx, resource)
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
