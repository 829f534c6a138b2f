package admin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// clock is a settable clock for the admin service's samples.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time        { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration)   { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func ctx(t *testing.T) context.Context { return t.Context() }

// stores are a balance store on miniredis and a migrated ledger on
// in-memory SQLite, closed at the test's end.
func stores(t *testing.T) (*redisstore.Store, *mysqlstore.Store) {
	t.Helper()
	_, rdb, led := backends(t)
	return redisstore.New(rdb), led
}

// backends are a miniredis with a client of it and a migrated ledger on
// in-memory SQLite, closed at the test's end.
func backends(t *testing.T) (*miniredis.Miniredis, *redis.Client, *mysqlstore.Store) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	led, err := mysqlstore.OpenSQLite(ctx(t), ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = led.Close() })
	if err := led.Migrate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return mr, rdb, led
}

func sample(t *testing.T, ops *admin.Service) {
	t.Helper()
	if err := ops.Sample(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// The burn rate is the slope of the samples every instance writes to Redis,
// and exhaustsAt follows from it (on miniredis and SQLite, with a clock the
// test moves).
func TestBurnRateAndExhaustsAtFromSamples(t *testing.T) {
	rs, led := stores(t)
	sched := &period.Scheduler{}
	svc := quota.NewService(rs, led, led, sched, quota.Options{Audit: led})
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	ops := admin.New(admin.Deps{Quota: svc, Live: rs, Ledger: led, Audit: led, Sched: sched, Now: clk.Now})
	if _, _, err := svc.PutPolicy(ctx(t), quota.Policy{ResourceName: "burn", QuotaType: quota.TypeTokens, TotalLimit: 10000}); err != nil {
		t.Fatal(err)
	}
	apply := func(n int64) {
		if _, err := svc.Apply(ctx(t), quota.ApplyRequest{ResourceName: "burn", Amount: n}); err != nil {
			t.Fatal(err)
		}
	}
	sample(t, ops)
	st, f := statusOf(t, ops)
	if f.BurnRate != nil || f.ExhaustsAt != nil {
		t.Fatalf("with one fresh sample: %+v", f)
	}
	apply(600)
	clk.Add(time.Minute)
	sample(t, ops)
	apply(600)
	clk.Add(time.Minute)
	st, f = statusOf(t, ops)
	// 1200 tokens over the 120 s since the first sample.
	if f.BurnRate == nil || *f.BurnRate != 10 {
		t.Fatalf("burn rate %v, want 10 tokens/s", f.BurnRate)
	}
	want := clk.Now().Add(time.Duration(st.Remaining/10) * time.Second)
	if f.ExhaustsAt == nil || !f.ExhaustsAt.Equal(want) {
		t.Fatalf("exhaustsAt %v, want %v (remaining %d at 10/s)", f.ExhaustsAt, want, st.Remaining)
	}
	// Once the 5-minute window has passed them, the first samples no longer count: with no
	// consumption since, the rate is 0 and nothing exhausts.
	sample(t, ops)
	clk.Add(4*time.Minute + time.Second)
	_, f = statusOf(t, ops)
	if f.BurnRate == nil || *f.BurnRate != 0 || f.ExhaustsAt != nil {
		t.Fatalf("after 4 idle minutes: rate %v, exhaustsAt %v; want 0 and none", f.BurnRate, f.ExhaustsAt)
	}
}

func statusOf(t *testing.T, ops *admin.Service) (quota.StatusResponse, admin.Forecast) {
	t.Helper()
	st, f, err := ops.Status(ctx(t), "burn")
	if err != nil {
		t.Fatal(err)
	}
	return st, f
}
