package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// PoolWorld is one resource, "llm", with two GROWTH lines "a" and "b"
// (limit 100 000: dedicated 15 000 each, borrowing limit 7 500, buffer
// 10 000), seeded, on miniredis and an in-memory SQLite ledger: the world
// of the pools' administration (internal/admin) and controller
// (internal/poolctl) tests. Its clock (Clock) moves only when a test moves
// it; it is its own scheduler (PeriodAt: Per, whatever the time).
type PoolWorld struct {
	Ctx   context.Context
	RS    *redisstore.Store
	DB    *mysqlstore.Store
	MR    *miniredis.Miniredis
	Pol   quota.Policy
	Per   quota.Period
	Clock time.Time
	n     int
}

// NewPoolWorld returns a PoolWorld whose pool settings have elasticity el.
func NewPoolWorld(t *testing.T, el pools.Elasticity) *PoolWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	db, err := mysqlstore.OpenSQLite(ctx, ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w := &PoolWorld{Ctx: ctx, RS: redisstore.New(rdb), DB: db, Clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), MR: mr}
	w.Pol = quota.Policy{ResourceName: "llm", QuotaType: quota.TypeTokens, TotalLimit: 100_000, Timezone: "UTC",
		LeakThresholdSeconds: 300, FailMode: quota.FailClosed, CreatedAt: w.Clock.Add(-time.Hour), UpdatedAt: w.Clock}
	if _, _, err := db.PutPolicy(ctx, w.Pol); err != nil {
		t.Fatal(err)
	}
	set := pools.DefaultSettings()
	set.Elasticity = el
	lines := []pools.LineSpec{{Name: "a", Tier: pools.TierGrowth, Weight: 1}, {Name: "b", Tier: pools.TierGrowth, Weight: 1}}
	for _, l := range lines {
		if _, err := db.PutLine(ctx, "llm", l, w.Clock); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutPoolSettings(ctx, "llm", set, w.Clock); err != nil {
		t.Fatal(err)
	}
	lay, _ := pools.Plan(w.Pol.TotalLimit, set, lines)
	// A period around miniredis' clock (the real one), never ending.
	w.Per = quota.Period{Start: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
	if _, err := w.RS.Seed(ctx, "llm", w.Per, w.Pol.TotalLimit, quota.PeriodTotals{}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.RS.SetPoolLayout(ctx, "llm", lay, &pools.Moves{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.RS.SeedPools(ctx, "llm", w.Per, pools.Totals{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// Now is the world's clock.
func (w *PoolWorld) Now() time.Time { return w.Clock }

// PeriodAt is the world's period whatever the time.
func (w *PoolWorld) PeriodAt(quota.Policy, time.Time) (quota.Period, error) { return w.Per, nil }

// Quota is a quota Service on the world's stores, with its pools' stores
// (quota.PoolStores) and clock, behind breakers b.
func (w *PoolWorld) Quota(b quota.Breakers) *quota.Service {
	return quota.NewService(w.RS, w.DB, w.DB, &period.Scheduler{}, quota.Options{Now: w.Now, Breakers: b,
		Pools: quota.PoolStores{Config: w.DB, Balances: w.RS}})
}

// Use applies amount on line as a critical continuation, straight in
// Redis, and fails the test unless it is granted.
func (w *PoolWorld) Use(t *testing.T, line string, amount int64) {
	t.Helper()
	w.n++
	c := quota.ApplyCmd{ResourceName: "llm", SessionID: "s" + time.Duration(w.n).String(), Amount: amount, Period: w.Per, Lease: time.Minute,
		Pools: &quota.PoolsCmd{Line: line, Critical: true, Continuation: true}}
	r, err := w.RS.Apply(w.Ctx, c)
	if err != nil || r.Reason != "" {
		t.Fatalf("apply %s %d: %v %+v", line, amount, err, r)
	}
}

// Model reads the world's pools from Redis.
func (w *PoolWorld) Model(t *testing.T) *pools.Model {
	t.Helper()
	m, err := w.RS.PoolModel(w.Ctx, "llm", w.Per, pools.Layout{Lines: []pools.LineLayout{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Breaker is a quota.Breaker that is Open (refuses every call with
// ErrBreakerOpen) or counts the outcomes of the calls it lets through.
type Breaker struct {
	Open  bool
	Calls int
	Fails int
}

// ErrBreakerOpen is what an open Breaker answers (a quota.ErrUnavailable).
var ErrBreakerOpen = fmt.Errorf("breaker open: %w", quota.ErrUnavailable)

// Allow implements quota.Breaker.
func (b *Breaker) Allow() (func(error), error) {
	if b.Open {
		return nil, ErrBreakerOpen
	}
	return func(err error) {
		b.Calls++
		if err != nil {
			b.Fails++
		}
	}, nil
}

// CountingStore is a redisstore.Store that counts the calls a background
// loop's visit of a resource starts with or makes (its lock, taken or
// renewed, and the pools' read): a loop that skips the resource makes none.
type CountingStore struct {
	*redisstore.Store
	Calls int
}

// TryLock counts and calls the Store's.
func (s *CountingStore) TryLock(ctx context.Context, r, n string, ttl time.Duration) (string, error) {
	s.Calls++
	return s.Store.TryLock(ctx, r, n, ttl)
}

// RenewLock counts and calls the Store's.
func (s *CountingStore) RenewLock(ctx context.Context, r, n, tok string, ttl time.Duration) (bool, error) {
	s.Calls++
	return s.Store.RenewLock(ctx, r, n, tok, ttl)
}

// PoolModel counts and calls the Store's.
func (s *CountingStore) PoolModel(ctx context.Context, r string, per quota.Period, lay pools.Layout) (*pools.Model, error) {
	s.Calls++
	return s.Store.PoolModel(ctx, r, per, lay)
}
