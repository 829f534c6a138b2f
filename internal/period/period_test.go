package period

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func zone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

func policy(cron, tz string, created time.Time) quota.Policy {
	return quota.Policy{ResourceName: "r", ResetCron: cron, Timezone: tz, CreatedAt: created}
}

// checkShape fails unless per is in UTC, truncated to ms, and contains t.
func checkShape(tb testing.TB, per quota.Period, t time.Time) {
	tb.Helper()
	for _, x := range []time.Time{per.Start, per.End} {
		if x.IsZero() {
			continue
		}
		if x.Location() != time.UTC || !x.Equal(x.Truncate(time.Millisecond)) || x.Nanosecond()%int(time.Millisecond) != 0 {
			tb.Fatalf("period %v: %v is not UTC ms", per, x)
		}
	}
	if !per.End.IsZero() && !per.Start.Before(per.End) {
		tb.Fatalf("period [%v, %v) is empty", per.Start, per.End)
	}
	if !per.Contains(t) {
		tb.Fatalf("period [%v, %v) does not contain %v", per.Start, per.End, t)
	}
}

func TestPeriodAt(t *testing.T) {
	t.Parallel()
	created := utc("2025-06-01T10:17:00Z")
	old := utc("2020-01-01T00:00:00Z")
	cases := []struct {
		name       string
		p          quota.Policy
		at         time.Time
		start, end string // RFC 3339; end "" = never
	}{
		{"an empty resetCron never resets: one period from CreatedAt",
			policy("", "", created), utc("2031-02-03T04:05:06Z"), "2025-06-01T10:17:00Z", ""},
		{"an empty resetCron at CreatedAt is the same period",
			policy("", "Asia/Tokyo", created), created, "2025-06-01T10:17:00Z", ""},
		{"an empty resetCron before CreatedAt is the same period",
			policy("", "", created), created.Add(-time.Hour), "2025-06-01T10:17:00Z", ""},
		{"@daily in Asia/Tokyo resets at 15:00 UTC",
			policy("@daily", "Asia/Tokyo", old), utc("2026-03-10T16:00:00Z"), "2026-03-10T15:00:00Z", "2026-03-11T15:00:00Z"},
		{"@daily in Asia/Tokyo just before 15:00 UTC is still the previous day",
			policy("@daily", "Asia/Tokyo", old), utc("2026-03-10T14:59:59.999Z"), "2026-03-09T15:00:00Z", "2026-03-10T15:00:00Z"},
		{"@daily in Asia/Tokyo at exactly 15:00 UTC starts the new day",
			policy("@daily", "Asia/Tokyo", old), utc("2026-03-10T15:00:00Z"), "2026-03-10T15:00:00Z", "2026-03-11T15:00:00Z"},
		{"the first period starts at CreatedAt and ends at the next midnight",
			policy("@daily", "UTC", created), utc("2025-06-01T12:00:00Z"), "2025-06-01T10:17:00Z", "2025-06-02T00:00:00Z"},
		{"a time before CreatedAt falls in the first period",
			policy("@daily", "UTC", created), utc("2025-05-20T00:00:00Z"), "2025-06-01T10:17:00Z", "2025-06-02T00:00:00Z"},
		{"the second period starts at the first fire after CreatedAt",
			policy("@daily", "UTC", created), utc("2025-06-02T00:00:00Z"), "2025-06-02T00:00:00Z", "2025-06-03T00:00:00Z"},
		{"a 5-field cron fires on weekdays at 09:00: Friday's period runs to Monday",
			policy("0 9 * * 1-5", "UTC", old), utc("2026-03-14T12:00:00Z"), "2026-03-13T09:00:00Z", "2026-03-16T09:00:00Z"},
		{"a 6-field cron with seconds resets every 10 seconds",
			policy("*/10 * * * * *", "UTC", old), utc("2026-03-10T16:00:27.5Z"), "2026-03-10T16:00:20Z", "2026-03-10T16:00:30Z"},
		{"@hourly resets on the hour",
			policy("@hourly", "UTC", old), utc("2026-03-10T16:59:59.999Z"), "2026-03-10T16:00:00Z", "2026-03-10T17:00:00Z"},
		{"@hourly in a half-hour zone resets at half past in UTC",
			policy("@hourly", "Asia/Kolkata", old), utc("2026-03-10T16:10:00Z"), "2026-03-10T15:30:00Z", "2026-03-10T16:30:00Z"},
		{"@monthly in February 2026 lasts 28 days",
			policy("@monthly", "UTC", old), utc("2026-02-14T00:00:00Z"), "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"@monthly in February 2028 lasts 29 days",
			policy("@monthly", "UTC", old), utc("2028-02-29T23:59:59Z"), "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"@monthly in Asia/Tokyo starts at 15:00 UTC on the last day of the month before",
			policy("@monthly", "Asia/Tokyo", old), utc("2026-02-14T00:00:00Z"), "2026-01-31T15:00:00Z", "2026-02-28T15:00:00Z"},
		{"@weekly resets on Sunday midnight",
			policy("@weekly", "UTC", old), utc("2026-03-11T00:00:00Z"), "2026-03-08T00:00:00Z", "2026-03-15T00:00:00Z"},
		{"@yearly resets on 1 January",
			policy("@yearly", "UTC", old), utc("2026-07-01T00:00:00Z"), "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"@every 5h is anchored at CreatedAt: the first period",
			policy("@every 5h", "UTC", created), created.Add(4*time.Hour + 59*time.Minute), "2025-06-01T10:17:00Z", "2025-06-01T15:17:00Z"},
		{"@every 5h is anchored at CreatedAt: the period k=2",
			policy("@every 5h", "UTC", created), created.Add(10 * time.Hour), "2025-06-01T20:17:00Z", "2025-06-02T01:17:00Z"},
		{"@every 5h is anchored at CreatedAt: the period k=1000",
			policy("@every 5h", "Asia/Tokyo", created), created.Add(5000*time.Hour + time.Minute), "2025-12-26T18:17:00Z", "2025-12-26T23:17:00Z"},
		{"@every 5h before CreatedAt is the first period",
			policy("@every 5h", "UTC", created), created.Add(-time.Minute), "2025-06-01T10:17:00Z", "2025-06-01T15:17:00Z"},
		{"a policy created in 2020 with a minutely cron finds the 2026 minute",
			policy("* * * * *", "UTC", old), utc("2026-03-10T16:07:42.123Z"), "2026-03-10T16:07:00Z", "2026-03-10T16:08:00Z"},
		{"a cron firing every second of the 1st, asked on the 31st, starts at the last second of the 1st",
			policy("* * * 1 * *", "UTC", old), utc("2026-03-31T12:00:00Z"), "2026-03-01T23:59:59Z", "2026-04-01T00:00:00Z"},
		{"a leap-day cron asked the day before the next leap day starts at the previous one",
			policy("0 0 29 2 *", "UTC", old), utc("2028-02-28T00:00:00Z"), "2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"a leap-day cron before its first fire is the first period",
			policy("0 0 29 2 *", "UTC", utc("2020-03-01T00:00:00Z")), utc("2023-12-31T00:00:00Z"), "2020-03-01T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"CreatedAt below a millisecond is truncated",
			policy("@daily", "UTC", utc("2025-06-01T10:17:00.123456789Z")), utc("2025-06-01T12:00:00Z"), "2025-06-01T10:17:00.123Z", "2025-06-02T00:00:00Z"},
		{"CreatedAt in another zone is the same instant",
			policy("@daily", "UTC", utc("2025-06-01T10:17:00Z").In(zone("America/New_York"))), utc("2025-06-01T12:00:00Z"), "2025-06-01T10:17:00Z", "2025-06-02T00:00:00Z"},
	}
	var s Scheduler
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			at := c.at
			if at.Before(c.p.CreatedAt) {
				at = c.p.CreatedAt.UTC().Truncate(time.Millisecond)
			}
			for _, in := range []time.Time{c.at, c.at.In(zone("Pacific/Kiritimati"))} {
				per, err := s.PeriodAt(c.p, in)
				if err != nil {
					t.Fatal(err)
				}
				want := quota.Period{Start: utc(c.start)}
				if c.end != "" {
					want.End = utc(c.end)
				}
				if !per.Start.Equal(want.Start) || !per.End.Equal(want.End) {
					t.Fatalf("PeriodAt(%v) = [%v, %v), want [%v, %v)", in, per.Start, per.End, want.Start, want.End)
				}
				checkShape(t, per, at)
			}
		})
	}
}

func TestPeriodLengthsAcrossDST(t *testing.T) {
	t.Parallel()
	var s Scheduler
	ny := zone("America/New_York")
	p := policy("0 0 * * *", "America/New_York", utc("2025-01-01T00:00:00Z"))
	special := map[string]time.Duration{
		"2026-03-08": 23 * time.Hour, // spring forward
		"2026-11-01": 25 * time.Hour, // fall back
	}
	for d := time.Date(2026, 3, 1, 12, 0, 0, 0, ny); d.Before(time.Date(2026, 11, 30, 0, 0, 0, 0, ny)); d = d.AddDate(0, 0, 1) {
		per, err := s.PeriodAt(p, d)
		if err != nil {
			t.Fatal(err)
		}
		checkShape(t, per, d)
		day := d.Format(time.DateOnly)
		want, ok := special[day]
		if !ok {
			want = 24 * time.Hour
		}
		if got := per.End.Sub(per.Start); got != want {
			t.Errorf("%s: period [%v, %v) lasts %v, want %v", day, per.Start, per.End, got, want)
		}
		if st := per.Start.In(ny); st.Format(time.DateOnly) != day || st.Hour() != 0 || st.Minute() != 0 {
			t.Errorf("%s: period starts at %v, want local midnight of that day", day, st)
		}
	}
}

// sweepChain checks every period met when walking t from from to to in
// steps: each contains t, none is empty, and each ends where the next starts.
func sweepChain(t *testing.T, s *Scheduler, p quota.Policy, from, to time.Time, step time.Duration) []quota.Period {
	t.Helper()
	var chain []quota.Period
	for at := from; at.Before(to); at = at.Add(step) {
		per, err := s.PeriodAt(p, at)
		if err != nil {
			t.Fatal(err)
		}
		checkShape(t, per, at)
		if n := len(chain); n == 0 || !chain[n-1].Start.Equal(per.Start) {
			if n > 0 && !chain[n-1].End.Equal(per.Start) {
				t.Fatalf("period [%v, %v) is followed by [%v, %v): a gap or an overlap",
					chain[n-1].Start, chain[n-1].End, per.Start, per.End)
			}
			chain = append(chain, per)
		} else if !chain[n-1].End.Equal(per.End) {
			t.Fatalf("two periods start at %v: ending %v and %v", per.Start, chain[n-1].End, per.End)
		}
	}
	return chain
}

func TestANonexistentLocalTimeOnSpringForwardIsSkippedSanely(t *testing.T) {
	t.Parallel()
	// 02:30 does not exist in New York on 2026-03-08: robfig/cron does not
	// fire that day, so one period runs from 7 March 02:30 EST to 9 March
	// 02:30 EDT (47 hours).
	var s Scheduler
	ny := zone("America/New_York")
	p := policy("30 2 * * *", "America/New_York", utc("2025-01-01T00:00:00Z"))
	chain := sweepChain(t, &s, p, time.Date(2026, 3, 6, 12, 0, 0, 0, ny), time.Date(2026, 3, 11, 0, 0, 0, 0, ny), 7*time.Minute)
	var got []string
	for _, per := range chain {
		got = append(got, fmt.Sprintf("%s+%v", per.Start.In(ny).Format("01-02T15:04"), per.End.Sub(per.Start)))
	}
	want := []string{"03-06T02:30+24h0m0s", "03-07T02:30+47h0m0s", "03-09T02:30+24h0m0s", "03-10T02:30+24h0m0s"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("periods %v, want %v", got, want)
	}
}

func TestARepeatedLocalTimeOnFallBackGivesSanePeriods(t *testing.T) {
	t.Parallel()
	// 01:30 happens twice in New York on 2026-11-01; whatever robfig/cron
	// does, periods must tile time with no empty one.
	var s Scheduler
	ny := zone("America/New_York")
	for _, cron := range []string{"30 1 * * *", "0 1 * * *", "0 * * * *", "*/20 * * * *"} {
		p := policy(cron, "America/New_York", utc("2025-01-01T00:00:00Z"))
		sweepChain(t, &s, p, time.Date(2026, 10, 31, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 12, 0, 0, 0, ny), 3*time.Minute)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cron, tz string
		field          string // "" = valid
	}{
		{"an empty resetCron in UTC is valid", "", "", ""},
		{"a 5-field cron is valid", "0 0 * * *", "UTC", ""},
		{"a 6-field cron with seconds is valid", "*/10 * * * * *", "UTC", ""},
		{"descriptors are valid", "@monthly", "Asia/Tokyo", ""},
		{"@every with whole seconds is valid", "@every 1h30m", "UTC", ""},
		{"surrounding spaces are ignored", "  @daily ", "Europe/Berlin", ""},
		{"a bad cron is refused", "61 * * * *", "UTC", "resetCron"},
		{"garbage is refused", "every day", "UTC", "resetCron"},
		{"7 fields are refused", "0 0 0 * * * 2026", "UTC", "resetCron"},
		{"4 fields are refused", "0 0 * *", "UTC", "resetCron"},
		{"a TZ= prefix is refused", "TZ=Asia/Tokyo 0 0 * * *", "UTC", "resetCron"},
		{"a CRON_TZ= prefix is refused", "CRON_TZ=UTC 0 0 * * *", "UTC", "resetCron"},
		{"a cron that never fires (30 February) is refused", "30 2 30 2 *", "UTC", "resetCron"},
		{"an unknown descriptor is refused", "@fortnightly", "UTC", "resetCron"},
		{"@every below a second is refused", "@every 500ms", "UTC", "resetCron"},
		{"@every of zero is refused", "@every 0s", "UTC", "resetCron"},
		{"a negative @every is refused", "@every -5h", "UTC", "resetCron"},
		{"@every with a fraction of a second is refused", "@every 1.5s", "UTC", "resetCron"},
		{"an unknown timezone is refused", "@daily", "Mars/Olympus_Mons", "timezone"},
		{"Local is refused", "@daily", "Local", "timezone"},
		{"local in lower case is refused", "@daily", "local", "timezone"},
		{"a path-like timezone is refused", "@daily", "../../etc/passwd", "timezone"},
	}
	var s Scheduler
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for range 2 { // the second call may come from the cache
				err := s.Validate(c.cron, c.tz)
				if c.field == "" {
					if err != nil {
						t.Fatalf("Validate(%q, %q) = %v, want nil", c.cron, c.tz, err)
					}
					continue
				}
				var ve *quota.ValidationError
				if !errors.As(err, &ve) || ve.Field != c.field || ve.Reason == "" {
					t.Fatalf("Validate(%q, %q) = %v, want *quota.ValidationError on %s", c.cron, c.tz, err, c.field)
				}
				_, err = s.PeriodAt(policy(c.cron, c.tz, utc("2025-01-01T00:00:00Z")), utc("2026-01-01T00:00:00Z"))
				if !errors.As(err, &ve) || ve.Field != c.field {
					t.Fatalf("PeriodAt with (%q, %q) = %v, want *quota.ValidationError on %s", c.cron, c.tz, err, c.field)
				}
			}
		})
	}
}

func TestPeriodsTileTimeForRandomInstants(t *testing.T) {
	t.Parallel()
	type expr struct {
		cron, tz string
		// lookBack is long enough to hold the previous fire: the oracle walks
		// Next from t−lookBack.
		lookBack time.Duration
	}
	exprs := []expr{
		{"0 0 * * *", "America/New_York", 49 * time.Hour},
		{"30 2 * * *", "America/New_York", 49 * time.Hour},
		{"@daily", "Asia/Tokyo", 25 * time.Hour},
		{"@hourly", "Asia/Kathmandu", 2 * time.Hour},
		{"*/10 * * * * *", "UTC", time.Minute},
		{"0 9 * * 1-5", "Europe/London", 4 * 24 * time.Hour},
		{"@monthly", "Australia/Lord_Howe", 32 * 24 * time.Hour},
		{"15 3 1,15 * *", "America/Sao_Paulo", 17 * 24 * time.Hour},
		{"@weekly", "Pacific/Chatham", 8 * 24 * time.Hour},
		{"", "UTC", 0},
		{"@every 5h", "UTC", 0},
		{"@every 7m13s", "Asia/Tokyo", 0},
	}
	var s Scheduler
	rng := rand.New(rand.NewPCG(1, 2))
	created := utc("2025-12-20T08:41:13.777Z")
	year := utc("2026-01-01T00:00:00Z")
	for _, e := range exprs {
		p := policy(e.cron, e.tz, created)
		sched, err := s.compile(e.cron, e.tz)
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			at := year.Add(time.Duration(rng.Int64N(int64(366 * 24 * time.Hour))))
			if rng.IntN(4) == 0 { // exactly on a second: often a fire time
				at = at.Truncate(time.Second)
			}
			per, err := s.PeriodAt(p, at)
			if err != nil {
				t.Fatal(err)
			}
			checkShape(t, per, at)
			if per.Start.Before(created.Truncate(time.Millisecond)) {
				t.Fatalf("%q at %v: start %v before CreatedAt", e.cron, at, per.Start)
			}
			again, err := s.PeriodAt(p, per.Start)
			if err != nil || again != per {
				t.Fatalf("%q: PeriodAt(Start %v) = %v, %v; want the same period %v", e.cron, per.Start, again, err, per)
			}
			if per.End.IsZero() {
				if e.cron != "" {
					t.Fatalf("%q at %v: no end", e.cron, at)
				}
				continue
			}
			next, err := s.PeriodAt(p, per.End)
			if err != nil || !next.Start.Equal(per.End) {
				t.Fatalf("%q: PeriodAt(End %v) starts at %v, %v; want at End", e.cron, per.End, next.Start, err)
			}
			if last := per.End.Add(-time.Millisecond); true {
				if p2, _ := s.PeriodAt(p, last); p2 != per {
					t.Fatalf("%q: PeriodAt(End−1ms) = %v, want %v", e.cron, p2, per)
				}
			}
			if sched.sched != nil {
				// Oracle: the last fire ≤ at found by walking Next forward.
				lt := at.In(sched.loc)
				want := time.Time{}
				for f := sched.sched.Next(lt.Add(-e.lookBack)); !f.After(lt); f = sched.sched.Next(f) {
					want = f
				}
				if want.IsZero() {
					t.Fatalf("%q at %v: oracle found no fire in %v", e.cron, at, e.lookBack)
				}
				if want.Before(created) {
					want = created.Truncate(time.Millisecond)
				}
				if !per.Start.Equal(want) {
					t.Fatalf("%q at %v: start %v, oracle %v", e.cron, at, per.Start, want.UTC())
				}
			}
		}
	}
}

func TestTheServersLocalZoneDoesNotLeakIn(t *testing.T) {
	// Not parallel: it swaps time.Local, before the parallel tests run.
	saved := time.Local
	time.Local = zone("Asia/Kolkata")
	defer func() { time.Local = saved }()
	var s Scheduler
	for _, tz := range []string{"", "UTC"} {
		per, err := s.PeriodAt(policy("@daily", tz, utc("2025-01-01T00:00:00Z")), utc("2026-03-10T03:00:00Z"))
		if err != nil {
			t.Fatal(err)
		}
		if !per.Start.Equal(utc("2026-03-10T00:00:00Z")) || !per.End.Equal(utc("2026-03-11T00:00:00Z")) {
			t.Fatalf("timezone %q: [%v, %v), want the UTC day", tz, per.Start, per.End)
		}
	}
}

func TestTheSchedulerIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	var s Scheduler
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			crons := []string{"@daily", "@hourly", "*/5 * * * *", "bad cron"}
			for j := range 200 {
				c := crons[(i+j)%len(crons)]
				_ = s.Validate(c, "Asia/Tokyo")
				_, _ = s.PeriodAt(policy(c, "Europe/Paris", utc("2025-01-01T00:00:00Z")), utc("2026-03-10T03:00:00Z").Add(time.Duration(j)*time.Minute))
			}
		}()
	}
	wg.Wait()
}

func BenchmarkPeriodAt(b *testing.B) {
	created := utc("2020-01-01T00:00:00Z")
	at := utc("2026-03-10T16:07:42.123Z")
	for _, cron := range []string{"@daily", "@hourly", "@monthly", "* * * * *", "0 9 * * 1-5", "* * * 1 * *"} {
		b.Run(cron, func(b *testing.B) {
			var s Scheduler
			p := policy(cron, "America/New_York", created)
			for i := 0; b.Loop(); i++ {
				if _, err := s.PeriodAt(p, at.Add(time.Duration(i%1000)*time.Second)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
