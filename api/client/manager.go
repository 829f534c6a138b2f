package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// Manager defaults, from seed 000 §4 (client configuration) unless noted.
const (
	DefaultConnectTimeout   = 2 * time.Second  // dialling the center
	DefaultReadTimeout      = 5 * time.Second  // waiting for an answer's headers
	DefaultBreakerFailures  = 5                // consecutive failed calls that open the breaker
	DefaultBreakerOpenFor   = 60 * time.Second // open time before one probe call (half-open)
	DefaultRetryAttempts    = 3                // tries of one call, the first included
	DefaultRetryBase        = 100 * time.Millisecond
	DefaultRetryMax         = 2 * time.Second
	DefaultLeakGrace        = 300 * time.Second // leak guard: amount + this (seed 000 §4)
	DefaultReportInterval   = 5 * time.Second   // how often remembered usage is re-sent
	defaultHeartbeatSeconds = 30                // when an answer carries no interval
)

// Manager is the SDK a business service embeds: it opens sessions that look
// after themselves (Acquire, Do), serves high-rate use from local batches
// (LocalPool), and decides what happens while the center is slow, refusing
// or away (breaker, retries, fallback per resource). Create one per center
// with NewManager, share it, and Close it on shutdown. It is safe for
// concurrent use.
type Manager struct {
	c       *Client
	cfg     managerConfig
	breaker atomic.Pointer[gobreaker.CircuitBreaker[struct{}]] // swapped for a closed one by a good probe (probeOK)
	met     *metrics
	log     *slog.Logger

	types   sync.Map // resource → QuotaType, from Status, for Do and the leak guard
	pending *pending
	spool   *spool // nil without WithFailOpenSpool

	mu     sync.Mutex
	leases map[*Lease]struct{}
	pools  map[*LocalPool]struct{}
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// managerConfig is what the ManagerOptions set.
type managerConfig struct {
	clientID        string
	clientOpts      []Option
	connectTimeout  time.Duration
	readTimeout     time.Duration
	breakerFailures int
	breakerOpenFor  time.Duration
	retryAttempts   int
	retryBase       time.Duration
	retryMax        time.Duration
	leakGrace       time.Duration
	reportInterval  time.Duration
	fallbacks       map[string]Fallback
	defaultFallback Fallback
	registry        prometheus.Registerer
	logger          *slog.Logger
	now             func() time.Time
	pool            poolConfig // WithPoolDefaults
	spoolDir        string     // WithFailOpenSpool
}

// ManagerOption configures a Manager in NewManager. An invalid value makes
// NewManager fail with an error that names the option.
type ManagerOption func(*managerConfig) error

// optionError names the option a bad value was given to.
func optionError(opt, format string, args ...any) error {
	return fmt.Errorf("client: NewManager: %s: %s", opt, fmt.Sprintf(format, args...))
}

// WithClientID sets the clientId recorded in the ledger for every session
// the Manager opens (at most 128 characters; "" = none).
func WithClientID(id string) ManagerOption {
	return func(c *managerConfig) error {
		if len(id) > 128 {
			return optionError("WithClientID", "%d characters, at most 128", len(id))
		}
		c.clientID = id
		return nil
	}
}

// WithClientOptions passes options (WithAPIKey, WithAdminToken,
// WithUserAgent, WithHTTPClient, …) to the Client the Manager builds. They
// are applied after the Manager's own transport and timeout, so
// WithHTTPClient replaces the connect and read timeouts.
func WithClientOptions(opts ...Option) ManagerOption {
	return func(c *managerConfig) error { c.clientOpts = append(c.clientOpts, opts...); return nil }
}

// WithTimeouts sets the connect timeout (dialling the center) and the read
// timeout (from the request sent to the answer's headers); each try of a
// call is bounded by their sum. Both must be positive; defaults 2 s and 5 s.
func WithTimeouts(connect, read time.Duration) ManagerOption {
	return func(c *managerConfig) error {
		if connect <= 0 || read <= 0 {
			return optionError("WithTimeouts", "connect %v and read %v must both be positive", connect, read)
		}
		c.connectTimeout, c.readTimeout = connect, read
		return nil
	}
}

// WithBreaker sets the circuit breaker: it opens after failures consecutive
// failed calls (transport errors, timeouts, 5xx and 408 answers; a 4xx
// decision such as 429 is not a failure), refuses every call for openFor,
// then lets one probe call through (half-open). failures ≥ 1, openFor > 0;
// defaults 5 and 60 s.
func WithBreaker(failures int, openFor time.Duration) ManagerOption {
	return func(c *managerConfig) error {
		if failures < 1 || openFor <= 0 {
			return optionError("WithBreaker", "failures %d must be at least 1 and openFor %v positive", failures, openFor)
		}
		c.breakerFailures, c.breakerOpenFor = failures, openFor
		return nil
	}
}

// WithRetry sets how a call that failed transiently (transport error,
// timeout, 408, 5xx) is tried again: at most attempts tries in all, waiting
// a random time in [0, min(max, base·2^try)) between tries ("full jitter"),
// or the server's Retry-After when that is longer, and never past the
// caller's context deadline. attempts ≥ 1 (1 = no retry), 0 < base ≤ max;
// defaults 3, 100 ms, 2 s.
func WithRetry(attempts int, base, max time.Duration) ManagerOption {
	return func(c *managerConfig) error {
		if attempts < 1 || base <= 0 || max < base {
			return optionError("WithRetry", "attempts %d must be at least 1 and 0 < base %v <= max %v", attempts, base, max)
		}
		c.retryAttempts, c.retryBase, c.retryMax = attempts, base, max
		return nil
	}
}

// WithLeakGuard sets the grace of the local leak guard: a lease not
// finished within its amount (seconds, on a DURATION resource) plus grace is
// finished with its whole grant, logged and counted. grace > 0; default
// 300 s (seed 000 §4).
func WithLeakGuard(grace time.Duration) ManagerOption {
	return func(c *managerConfig) error {
		if grace <= 0 {
			return optionError("WithLeakGuard", "grace %v must be positive", grace)
		}
		c.leakGrace = grace
		return nil
	}
}

// WithReportInterval sets how often usage the center could not take yet
// (fail-open use, finishes that failed) is sent again. d > 0; default 5 s.
func WithReportInterval(d time.Duration) ManagerOption {
	return func(c *managerConfig) error {
		if d <= 0 {
			return optionError("WithReportInterval", "%v must be positive", d)
		}
		c.reportInterval = d
		return nil
	}
}

// WithFallback chooses what Acquire and Do do on resource when the center
// cannot answer (see Fallback); resource "" sets the default for every
// resource without its own. The default default is FailClosed.
func WithFallback(resource string, f Fallback) ManagerOption {
	return func(c *managerConfig) error {
		if err := f.validate(); err != nil {
			return optionError("WithFallback", "resource %q: %v", resource, err)
		}
		if resource == "" {
			c.defaultFallback = f
			return nil
		}
		c.fallbacks[resource] = f
		return nil
	}
}

// WithRegistry registers the Manager's Prometheus metrics (quota_client_*,
// see docs/sdk.md) on reg. Two Managers on one registry need distinct
// labels: wrap reg with prometheus.WrapRegistererWith. Without it the
// metrics are kept but not exported.
func WithRegistry(reg prometheus.Registerer) ManagerOption {
	return func(c *managerConfig) error {
		if reg == nil {
			return optionError("WithRegistry", "nil registry")
		}
		c.registry = reg
		return nil
	}
}

// WithLogger sets where the Manager logs leak-guard firings, breaker state
// changes and fallbacks; default slog.Default().
func WithLogger(l *slog.Logger) ManagerOption {
	return func(c *managerConfig) error {
		if l == nil {
			return optionError("WithLogger", "nil logger")
		}
		c.logger = l
		return nil
	}
}

// NewManager returns a Manager for the center at baseURL (as New takes it).
// It fails, naming the option, when an option is invalid.
func NewManager(baseURL string, opts ...ManagerOption) (*Manager, error) {
	cfg := managerConfig{
		connectTimeout:  DefaultConnectTimeout,
		readTimeout:     DefaultReadTimeout,
		breakerFailures: DefaultBreakerFailures,
		breakerOpenFor:  DefaultBreakerOpenFor,
		retryAttempts:   DefaultRetryAttempts,
		retryBase:       DefaultRetryBase,
		retryMax:        DefaultRetryMax,
		leakGrace:       DefaultLeakGrace,
		reportInterval:  DefaultReportInterval,
		fallbacks:       map[string]Fallback{},
		defaultFallback: FailClosed(),
		now:             time.Now,
		pool:            defaultPoolConfig(),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	tr := newTransport()
	tr.DialContext = (&net.Dialer{Timeout: cfg.connectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = cfg.connectTimeout
	tr.ResponseHeaderTimeout = cfg.readTimeout
	copts := append([]Option{
		WithHTTPClient(&http.Client{Transport: tr}),
		WithTimeout(cfg.connectTimeout + cfg.readTimeout),
	}, cfg.clientOpts...)
	c, err := New(baseURL, copts...)
	if err != nil {
		return nil, err
	}
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{
		c: c, cfg: cfg, log: log,
		leases: map[*Lease]struct{}{},
		pools:  map[*LocalPool]struct{}{},
		stop:   make(chan struct{}),
	}
	if cfg.spoolDir != "" {
		if !spoolSupported {
			return nil, optionError("WithFailOpenSpool", "not supported on this platform (needs flock)")
		}
		if m.spool, err = openSpool(cfg.spoolDir, log); err != nil {
			return nil, optionError("WithFailOpenSpool", "%v", err)
		}
	}
	m.met = newMetrics()
	if cfg.registry != nil {
		if err := m.met.register(cfg.registry); err != nil {
			m.spool.close()
			return nil, optionError("WithRegistry", "%v", err)
		}
	}
	m.breaker.Store(m.newBreaker())
	m.pending = newPending(m)
	if m.spool != nil {
		m.pending.addLoaded(m.spool.adopt()...)
	}
	m.wg.Add(1)
	go m.reportLoop()
	return m, nil
}

// Client returns the plain API client the Manager calls through, for the
// calls it does not wrap (Status, policies, audit, reconcile).
func (m *Manager) Client() *Client { return m.c }

// BreakerState returns the breaker's state: "closed", "half-open" or "open".
func (m *Manager) BreakerState() string { return m.breaker.Load().State().String() }

// newBreaker makes a closed breaker as WithBreaker says. Only the Manager's
// current breaker reports its state changes: one replaced by probeOK may
// still move (to half-open once its open time is over, when a call that
// loaded it before the swap runs), which is no longer the Manager's state.
func (m *Manager) newBreaker() *gobreaker.CircuitBreaker[struct{}] {
	var cb *gobreaker.CircuitBreaker[struct{}]
	cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "quota-center",
		MaxRequests: 1,
		Timeout:     m.cfg.breakerOpenFor,
		ReadyToTrip: func(counts gobreaker.Counts) bool {
			return int64(counts.ConsecutiveFailures) >= int64(m.cfg.breakerFailures)
		},
		IsSuccessful: func(err error) bool { return !isCenterFailure(err) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if m.breaker.Load() != cb {
				return // replaced by probeOK
			}
			m.met.breakerState.Set(float64(to))
			m.log.Warn("quota-center client: circuit breaker", "from", from.String(), "to", to.String())
		},
	})
	return cb
}

// probeOK closes the breaker b after a probe the center answered (see
// pending.flush): b is replaced by a closed breaker unless another probe
// did so already.
func (m *Manager) probeOK(b *gobreaker.CircuitBreaker[struct{}]) {
	if m.breaker.CompareAndSwap(b, m.newBreaker()) {
		m.met.breakerState.Set(float64(gobreaker.StateClosed))
		// Not b.State(): it would move b to half-open once its open time is over.
		m.log.Warn("quota-center client: circuit breaker", "from", "open", "to", "closed", "why", "a usage report reached the center")
	}
}

// PendingReports returns how many usage reports wait for the center
// (fail-open leases and finishes it did not take yet, and, with
// WithFailOpenSpool, those adopted from a Manager that is gone).
func (m *Manager) PendingReports() int { return m.pending.len() }

// newSessionID makes a UUIDv7 session id: time-ordered, so ledger rows of
// one client sort by creation, and made before the first call so that every
// retry of an apply is the same apply.
func newSessionID() string {
	id, err := uuid.NewV7()
	if err != nil { // only when the random source fails
		return uuid.NewString()
	}
	return id.String()
}

// ErrManagerClosed is returned by calls on a closed Manager.
var ErrManagerClosed = errors.New("quota-center client: manager closed")

// Close finishes every open lease with its usage so far (as a cancelled
// context does), closes every LocalPool (returning unused batch units),
// tries once more to send the remembered usage, and stops the background
// work. It returns an error when usage is still unreported when ctx ends:
// without WithFailOpenSpool that usage is lost with the process; with it,
// the spool file keeps it for the next Manager started on the same dir.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	leases := make([]*Lease, 0, len(m.leases))
	for l := range m.leases {
		leases = append(leases, l)
	}
	pools := make([]*LocalPool, 0, len(m.pools))
	for p := range m.pools {
		pools = append(pools, p)
	}
	m.mu.Unlock()
	var errs []error
	for _, p := range pools {
		errs = append(errs, p.Close(ctx))
	}
	for _, l := range leases {
		l.end(endCancelled)
	}
	close(m.stop)
	m.wg.Wait()
	why := m.pending.flush(ctx)
	if n := m.pending.len(); n > 0 {
		kept := "lost"
		if m.spool != nil {
			kept = "kept in " + m.spool.path + " for the next Manager on " + m.spool.dir
		}
		if why == nil { // not expected: flush stops early only on an error
			why = ErrUnavailable
		}
		errs = append(errs, fmt.Errorf("quota-center client: %d usage reports not delivered (%s): %w", n, kept, why))
	}
	if m.spool != nil {
		m.spool.close()
	}
	m.c.HTTPClient().CloseIdleConnections()
	return errors.Join(errs...)
}

// reportLoop re-sends remembered usage every report interval until Close.
func (m *Manager) reportLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.reportInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if m.spool != nil { // the reports of Managers that died since
				m.pending.addLoaded(m.spool.adopt()...)
			}
			m.flushRound()
		}
	}
}

// flushRound is one report round of reportLoop. It may run for the report
// interval or for one report's budget (an apply and a finish, each with
// its retries: 2 × finishBudget), whichever is longer: bounded by the
// interval alone, a center slower than half of it per call never took a
// report (each round cancelled its first one), and the usage stayed
// pending for as long as the center stayed that slow. Close ends a round at
// once (it sends what is pending itself, under its own context).
func (m *Manager) flushRound() {
	ctx, cancel := context.WithTimeout(context.Background(), max(m.cfg.reportInterval, 2*m.finishBudget()))
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	m.pending.flush(ctx)
}

// fallbackFor returns the fallback chosen for resource.
func (m *Manager) fallbackFor(resource string) Fallback {
	if f, ok := m.cfg.fallbacks[resource]; ok {
		return f
	}
	return m.cfg.defaultFallback
}

// quotaType returns resource's unit, asking the center once (Status) and
// remembering it; "" when the center could not say.
func (m *Manager) quotaType(ctx context.Context, resource string) QuotaType {
	if t, ok := m.types.Load(resource); ok {
		return t.(QuotaType)
	}
	var st *QuotaStatus
	err := m.call(ctx, "status", func(ctx context.Context) error {
		var err error
		st, err = m.c.Status(ctx, resource)
		return err
	})
	if err != nil {
		return ""
	}
	m.types.Store(resource, st.QuotaType)
	return st.QuotaType
}
