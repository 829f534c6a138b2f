// Package breaker puts sony/gobreaker circuit breakers in front of the
// balance store (Redis) and the ledger (MySQL). After Failures consecutive
// backend failures (errors matching quota.ErrUnavailable) a breaker opens:
// calls fail at once with *quota.CircuitOpenError (HTTP 503
// CIRCUIT_BREAKER_OPEN with Retry-After) instead of piling up timeouts. After
// OpenFor it lets one probe through (half-open); a success closes it.
//
// Domain answers (not found, conflict, exhausted) are successes for the
// breaker; a caller's cancelled context is neither success nor failure.
//
// It imports quota, gobreaker and prometheus.
package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Settings tune a breaker.
type Settings struct {
	Failures uint32        // consecutive failures that open it (default 5)
	OpenFor  time.Duration // how long it stays open before a probe (default 5s)
}

// Breaker guards one backend.
type Breaker struct {
	name    string
	openFor time.Duration
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// Metrics are the breaker gauges and counters, shared by every breaker:
// quota_circuit_breaker_state{backend} (0 closed, 1 half-open, 2 open) and
// quota_circuit_breaker_transitions_total{backend,to}.
type Metrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// NewMetrics registers the breaker metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_circuit_breaker_state", Help: "Circuit breaker state per backend: 0 closed, 1 half-open, 2 open.",
		}, []string{"backend"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_circuit_breaker_transitions_total", Help: "Circuit breaker state changes per backend and new state.",
		}, []string{"backend", "to"}),
	}
	reg.MustRegister(m.state, m.transitions)
	return m
}

// New makes the breaker of one backend ("redis" or "mysql").
func New(name string, s Settings, m *Metrics, log *zap.Logger) *Breaker {
	if s.Failures == 0 {
		s.Failures = 5
	}
	if s.OpenFor <= 0 {
		s.OpenFor = 5 * time.Second
	}
	m.state.WithLabelValues(name).Set(0)
	for _, to := range []string{"closed", "half-open", "open"} {
		m.transitions.WithLabelValues(name, to)
	}
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     s.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= s.Failures },
		IsSuccessful: func(err error) bool {
			return err == nil || !errors.Is(err, quota.ErrUnavailable)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			m.state.WithLabelValues(name).Set(float64(to))
			m.transitions.WithLabelValues(name, to.String()).Inc()
			log.Warn("circuit breaker changed state", zap.String("backend", name),
				zap.String("from", from.String()), zap.String("to", to.String()))
		},
	})
	return &Breaker{name: name, openFor: s.OpenFor, cb: cb}
}

// State is the breaker's state now: "closed", "half-open" or "open".
func (b *Breaker) State() string { return b.cb.State().String() }

// do runs fn through the breaker.
func do[T any](b *Breaker, fn func() (T, error)) (T, error) {
	done, err := b.cb.Allow()
	if err != nil {
		var zero T
		return zero, &quota.CircuitOpenError{Backend: b.name, RetryAfter: b.openFor}
	}
	v, err := fn()
	done(err)
	return v, err
}

func run(b *Breaker, fn func() error) error {
	_, err := do(b, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// BalanceStore guards a quota.BalanceStore.
type BalanceStore struct {
	Inner quota.BalanceStore
	B     *Breaker
}

var _ quota.BalanceStore = BalanceStore{}

// Apply implements quota.BalanceStore.
func (s BalanceStore) Apply(ctx context.Context, c quota.ApplyCmd) (quota.ApplyResult, error) {
	return do(s.B, func() (quota.ApplyResult, error) { return s.Inner.Apply(ctx, c) })
}

// Cancel implements quota.BalanceStore.
func (s BalanceStore) Cancel(ctx context.Context, resource, id string) error {
	return run(s.B, func() error { return s.Inner.Cancel(ctx, resource, id) })
}

// Heartbeat implements quota.BalanceStore.
func (s BalanceStore) Heartbeat(ctx context.Context, resource, id, client string, lease time.Duration) (time.Time, error) {
	return do(s.B, func() (time.Time, error) { return s.Inner.Heartbeat(ctx, resource, id, client, lease) })
}

// Finish implements quota.BalanceStore.
func (s BalanceStore) Finish(ctx context.Context, c quota.FinishCmd) (quota.FinishResult, error) {
	return do(s.B, func() (quota.FinishResult, error) { return s.Inner.Finish(ctx, c) })
}

// Balance implements quota.BalanceStore.
func (s BalanceStore) Balance(ctx context.Context, resource string, p quota.Period) (quota.Balance, error) {
	return do(s.B, func() (quota.Balance, error) { return s.Inner.Balance(ctx, resource, p) })
}

// Seed implements quota.BalanceStore.
func (s BalanceStore) Seed(ctx context.Context, resource string, p quota.Period, limit int64, t quota.PeriodTotals, open []quota.UsageRecord, lease time.Duration) (bool, error) {
	return do(s.B, func() (bool, error) { return s.Inner.Seed(ctx, resource, p, limit, t, open, lease) })
}

// TryLock implements quota.BalanceStore.
func (s BalanceStore) TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error) {
	return do(s.B, func() (string, error) { return s.Inner.TryLock(ctx, resource, name, ttl) })
}

// Unlock implements quota.BalanceStore. It bypasses the breaker: releasing a
// lock is cleanup, and refusing it while the breaker is open would keep the
// lock held until it expires.
func (s BalanceStore) Unlock(ctx context.Context, resource, name, token string) error {
	return s.Inner.Unlock(ctx, resource, name, token)
}

// SetLimit implements quota.BalanceStore.
func (s BalanceStore) SetLimit(ctx context.Context, resource string, limit int64) error {
	return run(s.B, func() error { return s.Inner.SetLimit(ctx, resource, limit) })
}

// Sweep implements quota.BalanceStore.
func (s BalanceStore) Sweep(ctx context.Context, resource string, max int, retention time.Duration) ([]quota.LeakedSession, error) {
	return do(s.B, func() ([]quota.LeakedSession, error) { return s.Inner.Sweep(ctx, resource, max, retention) })
}

// AckLeaks implements quota.BalanceStore.
func (s BalanceStore) AckLeaks(ctx context.Context, resource string, ids []string) error {
	return run(s.B, func() error { return s.Inner.AckLeaks(ctx, resource, ids) })
}

// OpenSessionIDs implements quota.BalanceStore.
func (s BalanceStore) OpenSessionIDs(ctx context.Context, resource string, leaseBefore time.Time) ([]string, error) {
	return do(s.B, func() ([]string, error) { return s.Inner.OpenSessionIDs(ctx, resource, leaseBefore) })
}

// Sessions implements quota.BalanceStore.
func (s BalanceStore) Sessions(ctx context.Context, resource string, ids []string) (map[string]quota.SessionState, error) {
	return do(s.B, func() (map[string]quota.SessionState, error) { return s.Inner.Sessions(ctx, resource, ids) })
}

// RestoreSessions implements quota.BalanceStore.
func (s BalanceStore) RestoreSessions(ctx context.Context, resource string, open []quota.UsageRecord, lease time.Duration) error {
	return run(s.B, func() error { return s.Inner.RestoreSessions(ctx, resource, open, lease) })
}

// MarkFailOpen implements quota.BalanceStore.
func (s BalanceStore) MarkFailOpen(ctx context.Context, resource, id string) error {
	return run(s.B, func() error { return s.Inner.MarkFailOpen(ctx, resource, id) })
}

// FailOpenSessions implements quota.BalanceStore.
func (s BalanceStore) FailOpenSessions(ctx context.Context, resource string) ([]string, error) {
	return do(s.B, func() ([]string, error) { return s.Inner.FailOpenSessions(ctx, resource) })
}

// AckFailOpen implements quota.BalanceStore.
func (s BalanceStore) AckFailOpen(ctx context.Context, resource string, ids []string) error {
	return run(s.B, func() error { return s.Inner.AckFailOpen(ctx, resource, ids) })
}

// Adjust implements quota.BalanceStore.
func (s BalanceStore) Adjust(ctx context.Context, resource string, p quota.Period, dc, dr int64) (bool, error) {
	return do(s.B, func() (bool, error) { return s.Inner.Adjust(ctx, resource, p, dc, dr) })
}

// Store is the ledger and policy store together (mysqlstore.Store).
type Store interface {
	quota.Ledger
	quota.PolicyStore
}

// LedgerStore guards the ledger and policy store.
type LedgerStore struct {
	Inner Store
	B     *Breaker
}

var _ Store = LedgerStore{}

// InsertSession implements quota.Ledger.
func (s LedgerStore) InsertSession(ctx context.Context, rec quota.UsageRecord) error {
	return run(s.B, func() error { return s.Inner.InsertSession(ctx, rec) })
}

// FinishSession implements quota.Ledger.
func (s LedgerStore) FinishSession(ctx context.Context, rec quota.UsageRecord) error {
	return run(s.B, func() error { return s.Inner.FinishSession(ctx, rec) })
}

// MarkLeaked implements quota.Ledger.
func (s LedgerStore) MarkLeaked(ctx context.Context, leaks []quota.LeakedSession) error {
	return run(s.B, func() error { return s.Inner.MarkLeaked(ctx, leaks) })
}

// Session implements quota.Ledger.
func (s LedgerStore) Session(ctx context.Context, id string) (quota.UsageRecord, error) {
	return do(s.B, func() (quota.UsageRecord, error) { return s.Inner.Session(ctx, id) })
}

// PeriodTotals implements quota.Ledger.
func (s LedgerStore) PeriodTotals(ctx context.Context, resource string, start time.Time) (quota.PeriodTotals, error) {
	return do(s.B, func() (quota.PeriodTotals, error) { return s.Inner.PeriodTotals(ctx, resource, start) })
}

// OpenSessionsPage implements quota.Ledger.
func (s LedgerStore) OpenSessionsPage(ctx context.Context, resource string, after int64, limit int) ([]quota.UsageRecord, int64, error) {
	type page struct {
		rows []quota.UsageRecord
		next int64
	}
	p, err := do(s.B, func() (page, error) {
		rows, next, err := s.Inner.OpenSessionsPage(ctx, resource, after, limit)
		return page{rows, next}, err
	})
	return p.rows, p.next, err
}

// OpenSessions implements quota.Ledger.
func (s LedgerStore) OpenSessions(ctx context.Context, resource string) ([]quota.UsageRecord, error) {
	return do(s.B, func() ([]quota.UsageRecord, error) { return s.Inner.OpenSessions(ctx, resource) })
}

// SessionsByID implements quota.Ledger.
func (s LedgerStore) SessionsByID(ctx context.Context, ids []string) (map[string]quota.UsageRecord, error) {
	return do(s.B, func() (map[string]quota.UsageRecord, error) { return s.Inner.SessionsByID(ctx, ids) })
}

// GetPolicy implements quota.PolicyStore.
func (s LedgerStore) GetPolicy(ctx context.Context, resource string) (quota.Policy, error) {
	return do(s.B, func() (quota.Policy, error) { return s.Inner.GetPolicy(ctx, resource) })
}

// ListPolicies implements quota.PolicyStore.
func (s LedgerStore) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	return do(s.B, func() ([]quota.Policy, error) { return s.Inner.ListPolicies(ctx) })
}

// PutPolicy implements quota.PolicyStore.
func (s LedgerStore) PutPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error) {
	type out struct {
		p       quota.Policy
		created bool
	}
	o, err := do(s.B, func() (out, error) {
		p, c, err := s.Inner.PutPolicy(ctx, p)
		return out{p, c}, err
	})
	return o.p, o.created, err
}
