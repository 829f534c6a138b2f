package breaker

import (
	"context"
	"errors"
	"sync/atomic"
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

// withDefaults is s with its defaults filled in.
func (s Settings) withDefaults() Settings {
	if s.Failures == 0 {
		s.Failures = 5
	}
	if s.OpenFor <= 0 {
		s.OpenFor = 5 * time.Second
	}
	return s
}

// Breaker guards one backend, or one node of it (see PerNode).
type Breaker struct {
	name    string
	openFor time.Duration
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	gone    atomic.Bool // dropped by PerNode: its state is no longer exported
}

// Metrics are the breaker gauges and counters, shared by every breaker:
// quota_circuit_breaker_state{backend,node} (0 closed, 1 half-open, 2 open)
// and quota_circuit_breaker_transitions_total{backend,node,to}. node is ""
// for a breaker of a whole backend (MySQL, one Redis server or a
// Sentinel-managed master) and a master's host:port for the per-master
// breakers of a Redis Cluster (PerNode): the labels stay bounded by the
// masters, never by resources.
type Metrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// NewMetrics registers the breaker metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_circuit_breaker_state", Help: "Circuit breaker state per backend (and Redis Cluster master, node): 0 closed, 1 half-open, 2 open.",
		}, []string{"backend", "node"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_circuit_breaker_transitions_total", Help: "Circuit breaker state changes per backend (and Redis Cluster master, node) and new state.",
		}, []string{"backend", "node", "to"}),
	}
	reg.MustRegister(m.state, m.transitions)
	return m
}

// New makes the breaker of one backend ("redis" or "mysql").
func New(name string, s Settings, m *Metrics, log *zap.Logger) *Breaker {
	return newBreaker(name, "", s, m, log)
}

// newBreaker makes the breaker of one node of a backend ("" for all of it).
func newBreaker(name, node string, s Settings, m *Metrics, log *zap.Logger) *Breaker {
	s = s.withDefaults()
	b := &Breaker{name: name, openFor: s.OpenFor}
	m.state.WithLabelValues(name, node).Set(0)
	for _, to := range []string{"closed", "half-open", "open"} {
		m.transitions.WithLabelValues(name, node, to)
	}
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     s.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= s.Failures },
		IsSuccessful: func(err error) bool {
			return err == nil || !errors.Is(err, quota.ErrUnavailable)
		},
		// A cancelled caller says nothing about the backend, nor does a
		// cluster slot moving between healthy masters (issue 22, item 6).
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, quota.ErrSlotMoving)
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			if b.gone.Load() {
				return
			}
			m.state.WithLabelValues(name, node).Set(float64(to))
			m.transitions.WithLabelValues(name, node, to.String()).Inc()
			log.Warn("circuit breaker changed state", zap.String("backend", name), zap.String("node", node),
				zap.String("from", from.String()), zap.String("to", to.String()))
		},
	})
	b.cb = cb
	return b
}

// State is the breaker's state now: "closed", "half-open" or "open".
func (b *Breaker) State() string { return b.cb.State().String() }

// Allow implements quota.Breaker: it says whether a call may go ahead
// (else a *quota.CircuitOpenError) and returns the function that reports
// the call's outcome. quota.Guard calls it around every store call.
func (b *Breaker) Allow() (func(error), error) {
	done, err := b.cb.Allow()
	if err != nil {
		return nil, &quota.CircuitOpenError{Backend: b.name, RetryAfter: b.openFor}
	}
	return done, nil
}

var _ quota.Breaker = (*Breaker)(nil)
