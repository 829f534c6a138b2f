package period

import (
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA zones even on hosts without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/quotacenter/quota-center/internal/quota"
)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxLookBack bounds how far back PeriodAt searches for the previous fire
// time. It covers robfig/cron's own horizon (Next gives up five years after
// its argument), so every gap Next can bridge is found; only a cron silent for
// longer (a 29 February cron across 2100) has its period start at the
// policy's creation.
const maxLookBack = 5 * 366 * 24 * time.Hour

// forwardSteps is how many fires prevFire walks before it bisects.
const forwardSteps = 8

const everyPrefix = "@every "

// Scheduler implements quota.Scheduler. The zero value is ready to use; it
// caches parsed expressions and locations.
type Scheduler struct {
	mu    sync.Mutex
	cache map[string]compiled
}

var _ quota.Scheduler = (*Scheduler)(nil)

type compiled struct {
	sched cron.Schedule // nil: never resets
	every time.Duration // > 0 for @every
	loc   *time.Location
}

// Validate checks a resetCron expression and an IANA timezone name ("" means
// UTC). It returns a *quota.ValidationError naming the bad field.
func (s *Scheduler) Validate(expr, timezone string) error {
	_, err := s.compile(expr, timezone)
	return err
}

func (s *Scheduler) compile(expr, timezone string) (compiled, error) {
	key := expr + "\x00" + timezone
	s.mu.Lock()
	c, ok := s.cache[key]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	if timezone == "" {
		timezone = "UTC"
	}
	if strings.EqualFold(timezone, "local") {
		return c, &quota.ValidationError{Field: "timezone", Reason: "must be an IANA zone name such as UTC or Asia/Tokyo, not Local"}
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil {
		return c, &quota.ValidationError{Field: "timezone", Reason: fmt.Sprintf("unknown IANA zone %q", timezone)}
	}
	c.loc = loc
	if expr = strings.TrimSpace(expr); expr != "" {
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return c, &quota.ValidationError{Field: "resetCron", Reason: "give the zone in timezone, not inside resetCron"}
		}
		sch, err := parser.Parse(expr)
		if err != nil {
			return c, &quota.ValidationError{Field: "resetCron", Reason: err.Error()}
		}
		if d, ok := sch.(cron.ConstantDelaySchedule); ok {
			// robfig turns a negative, zero or sub-second delay into 1s and
			// drops fractions of a second: refuse what it would not honour.
			if asked, err := time.ParseDuration(strings.TrimPrefix(expr, everyPrefix)); err != nil ||
				asked < time.Second || asked%time.Second != 0 {
				return c, &quota.ValidationError{Field: "resetCron", Reason: "@every needs a whole number of seconds, at least 1s"}
			}
			c.every = d.Delay
		} else {
			c.sched = sch
			// An expression that can never fire (e.g. 30 February) would
			// make every period endless; refuse it.
			if sch.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
				return c, &quota.ValidationError{Field: "resetCron", Reason: "never fires"}
			}
		}
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = make(map[string]compiled)
	}
	if len(s.cache) > 10000 { // bounded: policies are few, but names come from admins
		clear(s.cache)
	}
	s.cache[key] = c
	s.mu.Unlock()
	return c, nil
}

// PeriodAt returns the period of p that contains t: it starts at the later of
// p.PeriodAnchor() (creation or the last manual reset) and the last fire time ≤ t, and ends at the next fire time > t
// (zero End when the policy never resets). Times are returned in UTC,
// truncated to milliseconds. A t before p.CreatedAt falls in the first period.
func (s *Scheduler) PeriodAt(p quota.Policy, t time.Time) (quota.Period, error) {
	c, err := s.compile(p.ResetCron, p.Timezone)
	if err != nil {
		return quota.Period{}, err
	}
	anchor := p.PeriodAnchor()
	t = t.UTC()
	if t.Before(anchor) {
		t = anchor
	}
	switch {
	case c.every > 0:
		k := t.Sub(anchor) / c.every
		start := anchor.Add(k * c.every)
		return quota.Period{Start: start, End: start.Add(c.every)}, nil
	case c.sched == nil:
		return quota.Period{Start: anchor}, nil
	}
	lt := t.In(c.loc)
	end := c.sched.Next(lt)
	start := prevFire(c.sched, lt, anchor.In(c.loc))
	return quota.Period{Start: ms(start), End: ms(end)}, nil
}

// prevFire finds the last fire time ≤ t, but not before anchor (then anchor).
// It looks back in doubling windows until one holds a fire, then walks
// forward from that fire; when the window holds many fires (a cron firing
// every second for a day once a month) it bisects instead. Its cost is
// logarithmic in the cron's interval and in the fires per window, never
// linear in the policy's age.
func prevFire(sch cron.Schedule, t, anchor time.Time) time.Time {
	// firstFrom is the first fire ≥ x: Next is strictly after its argument,
	// so step back a nanosecond.
	firstFrom := func(x time.Time) time.Time { return sch.Next(x.Add(-time.Nanosecond)) }
	upToT := func(f time.Time) bool { return !f.IsZero() && !f.After(t) }

	var lo time.Time // a fire in [anchor, t]
	for w := time.Minute; ; w *= 2 {
		if w > maxLookBack {
			w = maxLookBack // the last window covers the whole look-back
		}
		from := t.Add(-w)
		if from.Before(anchor) {
			from = anchor
		}
		if f := firstFrom(from); upToT(f) {
			lo = f
			break
		}
		if from.Equal(anchor) || w == maxLookBack {
			return anchor
		}
	}
	// The usual case: a few fires in the window. Next from a fire is cheap.
	for range forwardSteps {
		n := sch.Next(lo)
		if !upToT(n) {
			return lo
		}
		lo = n
	}
	// Many fires: bisect. Invariant: lo is a fire ≤ t and no fire lies in
	// (hi, t]. Fires are whole seconds, so once hi−lo ≤ 1s at most one is
	// left in (lo, hi].
	for hi := t; hi.Sub(lo) > time.Second; {
		mid := lo.Add(hi.Sub(lo) / 2)
		if f := firstFrom(mid); upToT(f) {
			lo = f
		} else {
			hi = mid
		}
	}
	// Step to the last fire ≤ t (also a guard should Next not be monotonic
	// somewhere, e.g. around a DST change): Next(start) must be > t.
	for n := sch.Next(lo); upToT(n); n = sch.Next(lo) {
		lo = n
	}
	return lo
}

func ms(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}
