package activity

import (
	"context"
	"sync"
	"time"
)

// DefaultFullVisit is how long a resource may go unvisited by a loop that
// skips unchanged resources (Visits) when Visits is made with 0: the bound
// on how long a change the log missed can go unseen. The losses the log
// detects make every resource due at once (a Redis restart or failover:
// EpochKey, Tracker.Reset; an instance that died before it published its
// last second: InstancesKey), so what is left to this bound is what
// nothing detects: clocks apart by more than ClockSkew, a change made
// past Tracker.Mutated. It was 1 minute before the instances' heartbeats
// (issue 23 §1: ~1,000 quiet used resources then cost ~360 Redis
// commands/s of full visits); it must stay within the window. Loops with
// a reason of their own to visit more often pass their own interval (the
// burn-rate sampler, whose samples must stay within admin.BurnWindow; the
// pool controller, whose settings change in MySQL only).
const DefaultFullVisit = 5 * time.Minute

// MinuteVisit is the full-visit interval of the loops that visit a quiet
// resource every minute for a reason of their own (see DefaultFullVisit).
const MinuteVisit = time.Minute

// Visits is what one background loop (the sweeper, the burn-rate sampler,
// the scrape's balance reads) remembers of its visits, so that it skips a
// resource nothing changed since its last visit (issue 23 §1: a resource
// used within the window but quiet now costs no Redis command per tick).
// A resource is due when:
//   - the loop has no clean visit of it (never visited, or the last visit
//     failed: Due forgets a due resource's visit until Done records it);
//   - it changed (Tracker.Mutated, on any instance: ChangedKey) at or after
//     its last visit started, less ClockSkew;
//   - the time the last visit named passed (a lease that runs out, a
//     period that ends);
//   - its last visit is older than the full-visit interval, or the change
//     log was lost (epoch changed, Tracker.Reset) after it;
//   - the change log cannot be read (Redis down): every resource is due,
//     as before this existed.
//
// Safe for concurrent use.
type Visits struct {
	t    *Tracker
	full int64 // ms

	mu     sync.Mutex
	last   map[string]visit
	pruned int64 // when visits older than full were last dropped, Unix ms
}

type visit struct {
	at  int64 // when the visit started, Unix ms
	due int64 // visit again at this time, Unix ms (0: only on a change)
}

// NewVisits returns the visits of one loop; full is the full-visit
// interval (DefaultFullVisit when ≤ 0).
func (t *Tracker) NewVisits(full time.Duration) *Visits {
	if full <= 0 {
		full = DefaultFullVisit
	}
	return &Visits{t: t, full: full.Milliseconds(), last: map[string]visit{}}
}

// Due returns the resources of names to visit now (in the order of names),
// and the start to pass to Done for each; names may be any subset of the
// loop's resources (the scrape asks one at a time). Visits older than the
// full-visit interval are forgotten (due anyway), so what is kept is
// bounded by the resources visited within it.
// A Redis error reading the change log makes every name due; the error is
// not returned (the loop's own calls meet it).
func (v *Visits) Due(ctx context.Context, names []string) (due []string, start time.Time) {
	start = v.t.now()
	now := start.UnixMilli()
	err := v.t.readChanges(ctx)
	v.t.mu.Lock()
	v.mu.Lock()
	for _, r := range names {
		vis, ok := v.last[r]
		if err != nil || !ok || now-vis.at >= v.full || vis.due != 0 && now >= vis.due || v.t.changedSince(r, vis.at) {
			due = append(due, r)
			delete(v.last, r)
		}
	}
	v.t.mu.Unlock()
	if now-v.pruned >= v.full { // visits that old are due anyway: forgotten
		for r, vis := range v.last {
			if now-vis.at >= v.full {
				delete(v.last, r)
			}
		}
		v.pruned = now
	}
	v.mu.Unlock()
	return due, start
}

// Done records a clean visit of resource that started at start (Due's):
// it is skipped until it changes, next passes (next ≥ 0: due at
// start+next; negative: no time of its own), or the full-visit interval. A loop whose
// visit failed does not call it: the resource stays due.
func (v *Visits) Done(resource string, start time.Time, next time.Duration) {
	vis := visit{at: start.UnixMilli()}
	if next >= 0 {
		vis.due = start.Add(next).UnixMilli()
	}
	v.mu.Lock()
	v.last[resource] = vis
	v.mu.Unlock()
}
