// Package period turns a policy's resetCron and timezone into accounting
// periods. It implements quota.Scheduler on top of robfig/cron/v3.
//
// Accepted resetCron forms: "" (never resets), 5-field cron
// ("0 0 * * *"), 6-field cron with seconds ("0 0 0 * * *"), and descriptors
// (@yearly, @monthly, @weekly, @daily, @hourly, @every 5h). Cron fire times
// are computed in the policy's IANA timezone, so "@daily" in Asia/Tokyo
// resets at 15:00 UTC and DST shifts are followed. "@every D" periods are
// anchored at the policy's creation time: [created + k·D, created + (k+1)·D).
//
// A policy's first period starts at its creation, not at the previous fire
// time: a new policy is never reset straight away, and usage before the
// policy existed does not count.
//
// It imports quota and robfig/cron only; the server's own TZ never leaks in
// (every time is converted to the policy's location or UTC).
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
// time; a cron that fires less often than this has its period start at the
// policy's creation or at the last fire found within it.
const maxLookBack = 5 * 366 * 24 * time.Hour

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
// p.CreatedAt and the last fire time ≤ t, and ends at the next fire time > t
// (zero End when the policy never resets). Times are returned in UTC,
// truncated to milliseconds. A t before p.CreatedAt falls in the first period.
func (s *Scheduler) PeriodAt(p quota.Policy, t time.Time) (quota.Period, error) {
	c, err := s.compile(p.ResetCron, p.Timezone)
	if err != nil {
		return quota.Period{}, err
	}
	anchor := p.CreatedAt.UTC().Truncate(time.Millisecond)
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
// It looks back in doubling windows, so its cost is logarithmic in the cron's
// interval and never linear in the policy's age.
func prevFire(sch cron.Schedule, t, anchor time.Time) time.Time {
	for w := time.Minute; w <= maxLookBack; w *= 2 {
		from := t.Add(-w)
		if from.Before(anchor) {
			from = anchor
		}
		// Next is strictly after its argument; step back a nanosecond so a
		// fire exactly at `from` is found.
		f := sch.Next(from.Add(-time.Nanosecond))
		if !f.IsZero() && !f.After(t) {
			for {
				n := sch.Next(f)
				if n.IsZero() || n.After(t) {
					break
				}
				f = n
			}
			if f.Before(anchor) {
				return anchor
			}
			return f
		}
		if from.Equal(anchor) {
			return anchor
		}
	}
	return anchor
}

func ms(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}
