package quota

import (
	"testing"
	"time"
)

// lengthSched is a Scheduler whose periods are whole hours for the cron
// "hourly" and whole days otherwise, and which counts its PeriodAt calls.
type lengthSched struct{ calls int }

func (*lengthSched) Validate(string, string) error { return nil }

func (s *lengthSched) PeriodAt(p Policy, t time.Time) (Period, error) {
	s.calls++
	unit := 24 * time.Hour
	if p.ResetCron == "hourly" {
		unit = time.Hour
	}
	start := t.UTC().Truncate(unit)
	return Period{Start: start, End: start.Add(unit)}, nil
}

// The length of the next period is computed once per resource, policy and
// period: a later period, or a changed policy, computes it again (a
// remembered length never answers for another reset schedule).
func TestChargePeriodLengthIsRememberedPerPolicyAndPeriod(t *testing.T) {
	sched := &lengthSched{}
	svc := &Service{sched: sched}
	day := Period{Start: testEpoch, End: testEpoch.Add(24 * time.Hour)}
	pol := testPolicy
	if d := svc.periodLength(pol, day); d != 24*time.Hour || sched.calls != 1 {
		t.Fatalf("first: %v after %d calls; want 24h after 1", d, sched.calls)
	}
	if d := svc.periodLength(pol, day); d != 24*time.Hour || sched.calls != 1 {
		t.Fatalf("again: %v after %d calls; want 24h remembered", d, sched.calls)
	}
	next := Period{Start: day.End, End: day.End.Add(24 * time.Hour)}
	if d := svc.periodLength(pol, next); d != 24*time.Hour || sched.calls != 2 {
		t.Fatalf("next period: %v after %d calls; want 24h computed again", d, sched.calls)
	}
	hourly := pol
	hourly.ResetCron, hourly.UpdatedAt = "hourly", testEpoch.Add(time.Minute)
	if d := svc.periodLength(hourly, next); d != time.Hour || sched.calls != 3 {
		t.Fatalf("changed policy: %v after %d calls; want 1h computed again", d, sched.calls)
	}
	other := pol
	other.ResourceName = "other"
	if d := svc.periodLength(other, next); d != 24*time.Hour || sched.calls != 4 {
		t.Fatalf("another resource: %v after %d calls; want its own 24h", d, sched.calls)
	}
	if d := svc.periodLength(pol, Period{Start: testEpoch}); d != 0 || sched.calls != 4 {
		t.Fatalf("a period that never ends: %v after %d calls; want 0, nothing computed", d, sched.calls)
	}
}
