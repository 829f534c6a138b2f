package activity

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newPair(t *testing.T) (*Tracker, *Tracker, *clock, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	c := &clock{t: time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)}
	dial := func() redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	o := Options{Window: 10 * time.Minute, Now: c.now}
	return New(dial(), o), New(dial(), o), c, mr
}

func active(t *testing.T, tr *Tracker) []string {
	t.Helper()
	got, err := tr.Active(context.Background())
	if err != nil {
		t.Fatalf("active: %v", err)
	}
	return got
}

// A resource touched on one instance is active on every instance once
// flushed, until the window after its last touch; an idle one is not.
func TestATouchedResourceIsActiveEverywhereForTheWindow(t *testing.T) {
	a, b, c, _ := newPair(t)
	ctx := context.Background()
	a.Touch("r1", time.Time{})
	if got := active(t, a); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("a before flush: %v, want its own touch r1", got)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := active(t, b); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("b: %v, want r1 from a", got)
	}
	c.t = c.t.Add(9 * time.Minute)
	b.Touch("r2", time.Time{})
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := active(t, a); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("a at 9 min: %v, want r1 r2", got)
	}
	c.t = c.t.Add(2 * time.Minute) // r1 idle 11 min
	if got := active(t, a); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("a at 11 min: %v, want r2 only (r1 idle for the window)", got)
	}
	if err := a.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.rdb.ZCard(ctx, Key).Result(); n != 1 {
		t.Fatalf("%d members after the trim, want 1", n)
	}
}

// A lease longer than the window keeps its resource active until the lease
// ran out plus the window (its sweep must still happen).
func TestALongLeaseKeepsItsResourceActive(t *testing.T) {
	a, b, c, _ := newPair(t)
	a.Touch("r", c.t.Add(time.Hour))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(69 * time.Minute)
	if got := active(t, b); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("at 69 min: %v, want r (lease to 60 min + 10 min window)", got)
	}
	c.t = c.t.Add(2 * time.Minute)
	if got := active(t, b); len(got) != 0 {
		t.Fatalf("at 71 min: %v, want none", got)
	}
}

// Touches are written to Redis once per tenth of the window, not per
// request: a thousand touches of one resource cost one ZADD a set.
func TestTouchesAreWrittenOncePerTenthOfTheWindow(t *testing.T) {
	a, _, c, mr := newPair(t)
	ctx := context.Background()
	writes := func() int { return mr.CommandCount() }
	for range 1000 {
		a.Touch("r", time.Time{})
	}
	if err := a.rdb.Ping(ctx).Err(); err != nil { // the connection's own set-up commands
		t.Fatal(err)
	}
	before := writes()
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range 30 { // 30 s of touches and flushes
		c.t = c.t.Add(time.Second)
		a.Touch("r", time.Time{})
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes() - before; n != 2 {
		t.Fatalf("%d Redis commands for 30 s of touches of one resource, want 2 (the first ZADD of each set)", n)
	}
	c.t = c.t.Add(31 * time.Second) // past a tenth of the window since the write
	a.Touch("r", time.Time{})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := writes() - before; n != 4 {
		t.Fatalf("%d Redis commands, want 4 (written again once a tenth of the window passed)", n)
	}
}

// With Redis down, Active answers the last set read with the local touches
// and the error; the touches are written once Redis is back.
func TestActiveWithRedisDownAnswersWhatItKnows(t *testing.T) {
	a, b, c, mr := newPair(t)
	ctx := context.Background()
	b.Touch("other", time.Time{})
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = active(t, a)
	mr.SetError("LOADING down")
	c.t = c.t.Add(2 * time.Second)
	a.Touch("mine", time.Time{})
	got, err := a.Active(ctx)
	if err == nil || !slices.Equal(got, []string{"mine", "other"}) {
		t.Fatalf("Redis down: %v, %v; want the last set read and the local touch, with an error", got, err)
	}
	if err := a.Flush(ctx); err == nil {
		t.Fatal("flush with Redis down: no error")
	}
	mr.SetError("")
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(2 * time.Second)
	if got := active(t, b); !slices.Equal(got, []string{"mine", "other"}) {
		t.Fatalf("b after Redis came back: %v", got)
	}
}

// A change makes a resource active, not used: the balance readers (Used)
// leave it out until a request uses it.
func TestAChangedResourceIsActiveNotUsed(t *testing.T) {
	a, b, _, _ := newPair(t)
	ctx := context.Background()
	a.Changed("new")
	a.Touch("busy", time.Time{})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := active(t, b); !slices.Equal(got, []string{"busy", "new"}) {
		t.Fatalf("active %v, want busy and new", got)
	}
	used, err := b.Used(ctx)
	if err != nil || !slices.Equal(used, []string{"busy"}) {
		t.Fatalf("used %v, %v; want busy only", used, err)
	}
}
