package admin

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Burn-rate settings.
const (
	// BurnWindow is the span the burn rate is measured over.
	BurnWindow = 5 * time.Minute
	// MinBurnSpan is the shortest history the burn rate is computed from;
	// with less (just after start or a reset) it is unknown.
	MinBurnSpan = 10 * time.Second
	// DefaultSampleInterval is how often Run samples every resource.
	DefaultSampleInterval = 10 * time.Second
)

// Forecast is a resource's burn rate and when its budget runs out at that
// rate.
type Forecast struct {
	// BurnRate is consumption (charged + reserved) per second over the last
	// BurnWindow of the current period, in the policy's unit; nil when less
	// than MinBurnSpan of samples exists. Never negative: refunds lower it
	// to 0, not below.
	BurnRate *float64
	// ExhaustsAt is when remaining reaches 0 at BurnRate: now when nothing
	// remains; nil when the budget lasts past the next reset, nothing is
	// being consumed or the rate is unknown.
	ExhaustsAt *time.Time
}

// ETA is the time from now to ExhaustsAt, and false when ExhaustsAt is nil.
func (f Forecast) ETA(now time.Time) (time.Duration, bool) {
	if f.ExhaustsAt == nil {
		return 0, false
	}
	return max(0, f.ExhaustsAt.Sub(now)), true
}

// computeForecast is the forecast of st at now from samples (any order):
// the slope from the oldest sample of the same period taken within
// BurnWindow and at least MinBurnSpan ago, to st itself.
func computeForecast(now time.Time, st quota.StatusResponse, samples []quota.BurnSample) Forecast {
	var f Forecast
	var base *quota.BurnSample
	for i := range samples {
		smp := &samples[i]
		age := now.Sub(smp.At)
		if !smp.PeriodStart.Equal(st.Period.Start) || age > BurnWindow || age < MinBurnSpan {
			continue
		}
		if base == nil || smp.At.Before(base.At) {
			base = smp
		}
	}
	if base != nil {
		rate := float64(st.Used+st.Reserved-base.Consumed) / now.Sub(base.At).Seconds()
		rate = max(rate, 0)
		f.BurnRate = &rate
	}
	switch {
	case st.Remaining <= 0:
		at := now
		f.ExhaustsAt = &at
	case f.BurnRate != nil && *f.BurnRate > 0:
		secs := float64(st.Remaining) / *f.BurnRate
		if secs > float64(100*365*24*3600) {
			break // beyond any reset or horizon worth a timestamp
		}
		at := now.Add(time.Duration(secs * float64(time.Second))).Truncate(time.Millisecond)
		if st.Period.End.IsZero() || at.Before(st.Period.End) {
			f.ExhaustsAt = &at
		}
	}
	return f
}

// Forecast reads the burn samples of st's resource and computes its
// forecast. Errors: quota.ErrUnavailable (Redis).
func (s *Service) Forecast(ctx context.Context, st quota.StatusResponse) (Forecast, error) {
	now := s.now()
	samples, err := s.d.Live.BurnSamples(ctx, st.Policy.ResourceName, now.Add(-BurnWindow))
	if err != nil {
		return Forecast{}, err
	}
	return computeForecast(now, st, samples), nil
}

// Status is the domain status of resource with its forecast. Errors: those
// of quota.Service.Status and Forecast.
func (s *Service) Status(ctx context.Context, resource string) (quota.StatusResponse, Forecast, error) {
	st, err := s.d.Quota.Status(ctx, resource)
	if err != nil {
		return st, Forecast{}, err
	}
	f, err := s.Forecast(ctx, st)
	return st, f, err
}

// Sample records one consumption sample of every active resource (every
// resource without Deps.Active; with Deps.SampleVisits only those that
// changed, see sampleChanged) in Redis, where every instance's forecast
// reads it. It returns the first error and goes on with the other
// resources.
func (s *Service) Sample(ctx context.Context) error {
	pols, err := s.sampled(ctx)
	if err != nil {
		return err
	}
	if s.d.SampleVisits != nil {
		return s.sampleChanged(ctx, pols)
	}
	var first error
	for _, p := range pols {
		st, err := s.d.Quota.Status(ctx, p.ResourceName)
		if err == nil {
			err = s.d.Live.RecordBurn(ctx, p.ResourceName, quota.BurnSample{
				At: s.now(), PeriodStart: st.Period.Start, Consumed: st.Used + st.Reserved,
			}, BurnWindow+time.Minute)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Run samples every resource each interval (DefaultSampleInterval when
// ≤ 0) until ctx ends; failures are logged at debug (the backends' own
// alerts say when they are down) and the next tick tries again.
func (s *Service) Run(ctx context.Context, interval time.Duration, log *zap.Logger) error {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, interval)
		if err := s.Sample(sctx); err != nil && ctx.Err() == nil {
			log.Debug("burn-rate sample failed", zap.Error(err))
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
