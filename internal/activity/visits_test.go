package activity

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"
)

func due(t *testing.T, v *Visits, names ...string) ([]string, time.Time) {
	t.Helper()
	return v.Due(context.Background(), names)
}

// Visit every due name cleanly (no time of its own) and return them.
func visitAll(t *testing.T, v *Visits, names ...string) []string {
	t.Helper()
	d, start := due(t, v, names...)
	for _, r := range d {
		v.Done(r, start, -1)
	}
	return d
}

// A resource nothing changed is skipped after its first visit; a change on
// this instance (not yet published) or on another one (published by its
// Flush) makes it due again, once.
func TestVisitsSkipUnchangedAndSeeEveryChange(t *testing.T) {
	a, b, c, _ := newPair(t)
	v := b.NewVisits(time.Hour)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("first visit: %v, want both", got)
	}
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("nothing changed: %v due, want none", got)
	}
	b.Mutated("r1") // local: seen without Redis
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("after a local change: %v, want r1", got)
	}
	c.t = c.t.Add(5 * time.Second)
	a.Mutated("r2")
	c.t = c.t.Add(500 * time.Millisecond)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("after a change on another instance: %v, want r2", got)
	}
	// Published within ClockSkew before that visit started: visited once
	// more (the other instance's clock may be behind).
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("a change published just before the visit: %v, want r2 again", got)
	}
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("quiet again: %v due, want none", got)
	}
}

// A visit that failed (no Done) leaves the resource due; a visit naming a
// time (a lease's end) makes it due then; every resource is due again
// after the full-visit interval.
func TestVisitsRetryFailuresHonourTimesAndVisitFully(t *testing.T) {
	_, b, c, _ := newPair(t)
	v := b.NewVisits(time.Minute)
	d, start := due(t, v, "r1", "r2", "r3")
	v.Done("r1", start, -1)
	v.Done("r2", start, 20*time.Second) // r3's visit failed
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2", "r3"); !slices.Equal(got, []string{"r3"}) || len(d) != 3 {
		t.Fatalf("after a failed visit: %v, want r3", got)
	}
	c.t = c.t.Add(15 * time.Second)
	if got := visitAll(t, v, "r1", "r2", "r3"); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("at r2's time: %v, want r2", got)
	}
	c.t = c.t.Add(40 * time.Second) // r1 last visited 60 s ago
	if got := visitAll(t, v, "r1", "r2", "r3"); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("after the full-visit interval: %v, want r1", got)
	}
}

// Redis restarted empty (the change log and its epoch gone): every
// resource is due once, on every instance; so after a failover
// (Tracker.Reset). While the change log cannot be read, every resource is
// due.
func TestVisitsAfterRedisRestartFailoverAndOutage(t *testing.T) {
	a, b, c, mr := newPair(t)
	v := b.NewVisits(time.Hour)
	visitAll(t, v, "r1", "r2")
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("quiet: %v", got)
	}
	a.Mutated("r1")
	mr.FlushAll() // restart without persistence: a's publication below lands in an empty Redis ...
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mr.FlushAll() // ... and is lost too (a second restart)
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("after a restart: %v, want every resource", got)
	}
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("quiet after the restart's visit: %v", got)
	}
	b.Reset() // the failover watcher saw a new master
	c.t = c.t.Add(time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("after a failover: %v, want every resource", got)
	}
	mr.SetError("LOADING")
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("change log unreadable: %v, want every resource", got)
	}
	mr.SetError("")
}

// Randomized: two instances change, publish (or not: a failed or late
// Flush) and visit resources on clocks up to ClockSkew apart; at the end,
// after every instance published and a read interval passed, every
// resource changed after the start of its last clean visit is due. Changes
// may be published late (a Flush that failed for a while).
func TestVisitsNeverMissAPublishedChange(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			a, b, c, _ := newPair(t)
			skew := time.Duration(rng.Int63n(int64(ClockSkew)))
			a.now = func() time.Time { return c.t.Add(skew) } // a's clock ahead or behind b's
			if rng.Intn(2) == 0 {
				a.now = func() time.Time { return c.t.Add(-skew) }
			}
			ctx := context.Background()
			names := []string{"r0", "r1", "r2", "r3"}
			v := b.NewVisits(time.Hour)
			lastStart := map[string]time.Time{} // b's clean visits
			changed := map[string]time.Time{}   // true time of the last change
			for step := 0; step < 60; step++ {
				c.t = c.t.Add(time.Duration(rng.Int63n(int64(3 * time.Second))))
				r := names[rng.Intn(len(names))]
				switch rng.Intn(4) {
				case 0:
					a.Mutated(r)
					changed[r] = c.t
				case 1:
					b.Mutated(r)
					changed[r] = c.t
				case 2:
					if err := a.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				case 3:
					d, start := v.Due(ctx, names)
					for _, r := range d {
						if rng.Intn(5) > 0 { // some visits fail
							v.Done(r, start, -1)
							lastStart[r] = start
						} else {
							delete(lastStart, r)
						}
					}
				}
			}
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			c.t = c.t.Add(changeReadEvery)
			d, _ := v.Due(ctx, names)
			for _, r := range names {
				s, visited := lastStart[r]
				if ch, ok := changed[r]; ok && visited && !ch.Before(s) && !slices.Contains(d, r) {
					t.Fatalf("%s changed at %v after its visit at %v, not due (skew %v)", r, ch, s, skew)
				}
			}
		})
	}
}

// The scrape asks one resource at a time: a visit of one resource is kept
// while others are asked about (each is skipped until it changes), and a
// visit is forgotten only once it is older than the full-visit interval.
func TestVisitsAskedOneAtATimeKeepEachOther(t *testing.T) {
	_, b, c, _ := newPair(t)
	v := b.NewVisits(time.Minute)
	for _, r := range []string{"r1", "r2", "r3"} {
		if got := visitAll(t, v, r); len(got) != 1 {
			t.Fatalf("first visit of %s: %v", r, got)
		}
	}
	c.t = c.t.Add(5 * time.Second)
	for _, r := range []string{"r1", "r2", "r3"} {
		if got := visitAll(t, v, r); len(got) != 0 {
			t.Fatalf("%s asked alone after the others: %v due, want none", r, got)
		}
	}
	b.Mutated("r2")
	c.t = c.t.Add(5 * time.Second)
	for _, r := range []string{"r1", "r2", "r3"} {
		got := visitAll(t, v, r)
		if want := r == "r2"; (len(got) == 1) != want {
			t.Fatalf("%s after r2 changed: %v due", r, got)
		}
	}
}

// An instance that died before it published its last changes (its
// heartbeat stops without a clean leave) makes every resource due once on
// the other instances, InstanceDeadAfter after its last heartbeat; one
// that stopped cleanly (Run ended: flushed, then left) makes nothing due.
// Without this, such a loss waited for the full visit (DefaultFullVisit).
func TestVisitsAfterAnInstanceDied(t *testing.T) {
	a, b, c, _ := newPair(t)
	ctx := context.Background()
	v := b.NewVisits(time.Hour)
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	visitAll(t, v, "r1", "r2")
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("quiet, a alive: %v due", got)
	}
	a.Mutated("r1")                                  // a dies before its next Flush: the change is never published
	c.t = c.t.Add(InstanceDeadAfter - 7*time.Second) // a's heartbeat 8 s old
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("a's heartbeat 8 s old: %v due, want none yet", got)
	}
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("a dead: %v due, want every resource", got)
	}
	c.t = c.t.Add(5 * time.Second)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
		t.Fatalf("a still dead, already seen: %v due, want none", got)
	}
	// A third instance runs and stops cleanly: its last change is
	// published, it leaves, nothing else is due.
	d := New(a.rdb, Options{Window: 10 * time.Minute, Now: c.now})
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(rctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n, _ := a.rdb.ZScore(ctx, InstancesKey, d.token).Result(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("d's heartbeat never written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.Mutated("r2")
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if n, _ := a.rdb.ZCard(ctx, InstancesKey).Result(); n != 1 { // a's, dead
		t.Fatalf("%d instances in %s after d left, want 1 (a's)", n, InstancesKey)
	}
	c.t = c.t.Add(InstanceDeadAfter + time.Second)
	if got := visitAll(t, v, "r1", "r2"); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("after d's clean stop: %v due, want r2 (its published change) only", got)
	}
}

// Liveness does not compare clocks across instances: instances
// heartbeating every second with clocks 30 s behind and 30 s ahead of the
// reader's (and one 30 minutes behind, past the window) make nothing due
// after the first visit, read after read; once one of them stops (no
// leave), every resource is due once, InstanceDeadAfter of the reader's
// clock later, then never again. Trim drops that dead instance's entry
// after the window, and none of the live ones however far behind.
// Before: an instance more than InstanceDeadAfter behind was "dead" with
// a new score at every read, and every resource was due every second.
func TestVisitsIgnoreSkewedClocksOfLiveInstances(t *testing.T) {
	_, b, c, _ := newPair(t)
	ctx := context.Background()
	skewed := func(d time.Duration) *Tracker {
		return New(b.rdb, Options{Window: 10 * time.Minute, Now: func() time.Time { return c.now().Add(d) }})
	}
	behind, ahead, far := skewed(-30*time.Second), skewed(30*time.Second), skewed(-30*time.Minute)
	beat := func(ts ...*Tracker) {
		t.Helper()
		for _, x := range ts {
			if err := x.heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	v := b.NewVisits(time.Hour)
	beat(behind, ahead, far)
	if got := visitAll(t, v, "r1", "r2"); len(got) != 2 {
		t.Fatalf("first visit: %v due, want both", got)
	}
	for i := range 20 {
		c.t = c.t.Add(time.Second)
		beat(behind, ahead, far)
		if got := visitAll(t, v, "r1", "r2"); len(got) != 0 {
			t.Fatalf("read %d, every instance alive: %v due, want none", i+1, got)
		}
	}
	// behind dies (no leave): due once, after InstanceDeadAfter.
	dueReads := 0
	for range 30 {
		c.t = c.t.Add(time.Second)
		beat(ahead, far)
		if got := visitAll(t, v, "r1", "r2"); len(got) > 0 {
			if !slices.Equal(got, []string{"r1", "r2"}) {
				t.Fatalf("behind dead: %v due, want every resource", got)
			}
			dueReads++
		}
	}
	if dueReads != 1 {
		t.Fatalf("behind dead: every resource due at %d reads, want 1", dueReads)
	}
	// Past the window: Trim drops behind's entry, keeps the live ones.
	for range 11 {
		c.t = c.t.Add(time.Minute)
		beat(ahead, far)
		visitAll(t, v, "r1", "r2")
	}
	if err := b.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := b.rdb.ZRange(ctx, InstancesKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	want := []string{ahead.token, far.token}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("after Trim: %v in %s, want %v (the live ones)", left, InstancesKey, want)
	}
}

// A heartbeat's score grows at every heartbeat even when the instance's
// clock stands still or goes back, so a live instance never looks dead.
func TestHeartbeatScoreAlwaysGrows(t *testing.T) {
	a, _, c, _ := newPair(t)
	ctx := context.Background()
	var last float64
	for i, step := range []time.Duration{0, 0, -time.Minute, time.Second} {
		c.t = c.t.Add(step)
		if err := a.heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := a.rdb.ZScore(ctx, InstancesKey, a.token).Result()
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && s <= last {
			t.Fatalf("heartbeat %d: score %v after %v", i, s, last)
		}
		last = s
	}
}

// Trim keeps an instance the reader saw dead when it heartbeated again
// since (its score moved: it came back), and reports Redis's error.
func TestTrimKeepsAnInstanceThatCameBack(t *testing.T) {
	a, b, c, mr := newPair(t)
	ctx := context.Background()
	v := b.NewVisits(time.Hour)
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	visitAll(t, v, "r1")
	c.t = c.t.Add(11 * time.Minute) // past the window, unchanged: dead to b
	visitAll(t, v, "r1")
	c.t = c.t.Add(11 * time.Minute)
	visitAll(t, v, "r1")
	if err := a.heartbeat(ctx); err != nil { // back, after b's last read
		t.Fatal(err)
	}
	if err := b.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.rdb.ZScore(ctx, InstancesKey, a.token).Result(); err != nil {
		t.Fatalf("a, back, trimmed: %v", err)
	}
	mr.Close()
	if err := b.trimInstances(ctx); err == nil {
		t.Fatal("trimInstances with Redis down: no error")
	}
}
