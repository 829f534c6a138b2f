package admin

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestComputeForecast(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	per := quota.Period{Start: now.Add(-time.Hour), End: now.Add(time.Hour)}
	other := quota.Period{Start: now.Add(-2 * time.Hour)}
	st := func(used, reserved, limit int64, p quota.Period) quota.StatusResponse {
		return quota.StatusResponse{Used: used, Reserved: reserved, Remaining: limit - used - reserved, Period: p}
	}
	smp := func(ago time.Duration, consumed int64, p quota.Period) quota.BurnSample {
		return quota.BurnSample{At: now.Add(-ago), PeriodStart: p.Start, Consumed: consumed}
	}
	f := func(v float64) *float64 { return &v }
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	tests := []struct {
		name    string
		st      quota.StatusResponse
		samples []quota.BurnSample
		rate    *float64
		exhaust *time.Time
	}{
		{"no samples: unknown", st(100, 0, 1000, per), nil, nil, nil},
		{"only a sample younger than 10 s: unknown", st(100, 0, 1000, per), []quota.BurnSample{smp(5*time.Second, 0, per)}, nil, nil},
		{"slope from the oldest sample in the window", st(300, 100, 4000, per),
			[]quota.BurnSample{smp(time.Minute, 300, per), smp(4*time.Minute, 100, per), smp(6*time.Minute, 0, per)},
			f(300.0 / 240), at(2880 * time.Second)},
		{"a sample of another period is ignored", st(60, 0, 1000, per),
			[]quota.BurnSample{smp(2*time.Minute, 0, other), smp(time.Minute, 0, per)}, f(1), at(940 * time.Second)},
		{"refunds never make it negative", st(10, 0, 1000, per), []quota.BurnSample{smp(time.Minute, 50, per)}, f(0), nil},
		{"lasts past the next reset: no exhaustsAt", st(60, 0, 1_000_000, per), []quota.BurnSample{smp(time.Minute, 0, per)}, f(1), nil},
		{"never-resetting period: any horizon", st(60, 0, 1_000_000, other), []quota.BurnSample{smp(time.Minute, 0, other)},
			f(1), at(999_940 * time.Second)},
		{"exhausted: now, whatever the rate", st(1000, 10, 1000, per), nil, nil, at(0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := computeForecast(now, tc.st, tc.samples)
			if (got.BurnRate == nil) != (tc.rate == nil) || (got.BurnRate != nil && abs(*got.BurnRate-*tc.rate) > 1e-9) {
				t.Errorf("rate = %v, want %v", deref(got.BurnRate), deref(tc.rate))
			}
			if (got.ExhaustsAt == nil) != (tc.exhaust == nil) ||
				(got.ExhaustsAt != nil && got.ExhaustsAt.Sub(*tc.exhaust).Abs() > time.Millisecond) {
				t.Errorf("exhaustsAt = %v, want %v", got.ExhaustsAt, tc.exhaust)
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
