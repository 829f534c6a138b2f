package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Leases is the clients' path of the domain: apply for a lease, keep it
// alive, finish it (*quota.Service).
type Leases interface {
	Apply(ctx context.Context, req quota.ApplyRequest) (quota.ApplyResponse, error)
	Heartbeat(ctx context.Context, resource, sessionID, clientID string) (quota.HeartbeatResponse, error)
	Finish(ctx context.Context, req quota.FinishRequest) (quota.FinishResponse, error)
}

// Policies is the policy side of the domain: read one or all, create or
// replace one, read the audit trail of changes (*quota.Service).
type Policies interface {
	Policy(ctx context.Context, resource string) (quota.Policy, error)
	Policies(ctx context.Context) ([]quota.Policy, error)
	PutPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error)
	Audit(ctx context.Context, f quota.AuditFilter) ([]quota.AuditRecord, error)
}

// Service is what the HTTP layer uses of the domain: *quota.Service, or
// any other implementation (a test double). A second front end declares
// its own.
type Service interface {
	Leases
	Policies
	Status(ctx context.Context, resource string) (quota.StatusResponse, error)
}

var _ Service = (*quota.Service)(nil)

// Deps is what the HTTP layer needs.
type Deps struct {
	Service  Service // nil only for a server that serves no domain route (tests)
	Logger   *zap.Logger
	Metrics  *Metrics
	Gatherer prometheus.Gatherer // serves /metrics
	// Ready reports whether this process can answer requests correctly; nil
	// means it can once it listens. /readyz is 503 when it fails or while
	// draining. It must not depend on Redis or MySQL: with a backend down
	// the process still answers correctly (503, or a fail-open grant, as
	// each policy says), and a shared-backend outage must not take every
	// instance out of its load balancer.
	Ready func(ctx context.Context) error
	// Backends reports each backend's health for /healthz/backends (200 when
	// all are up, 503 when one is down); nil serves an empty list.
	Backends func(ctx context.Context) []BackendHealth
	// MaxBodyBytes caps request bodies (413 beyond it); default 1 MiB.
	MaxBodyBytes int64
	// Auth says who may call /admin/* and /quota/*; the zero value leaves
	// both open (dev mode).
	Auth AuthConfig
	// Reconcile runs reconciliation now for one resource ("" = all) and
	// returns a JSON-ready report and how many of its resources were
	// skipped (another pass held the lock) (POST /admin/reconcile).
	Reconcile func(ctx context.Context, resource string) (reports any, skipped int, err error)
	// Operator serves the operators' endpoints (session map, usage,
	// forecast, patch/reset/delete, forced finish); nil answers them 501.
	Operator Operator
	// Pools serves the business lines, grants, buffer and reclaims
	// endpoints, by part (the zero value: none).
	Pools PoolAdmin
	// Lines gives the tier of a refused apply's business line for
	// quota_pool_refusals_total (nil: counted with tier "unknown").
	Lines LineTiers
}

// Server is the HTTP API. Handler returns its routes.
type Server struct {
	svc       Service
	log       *zap.Logger
	metrics   *Metrics
	gatherer  prometheus.Gatherer
	ready     func(ctx context.Context) error
	backends  func(ctx context.Context) []BackendHealth
	maxBody   int64
	auth      *auth
	reconcile func(ctx context.Context, resource string) (any, int, error)
	ops       Operator
	pools     PoolAdmin // Lines nil: no pools endpoints
	lines     LineTiers // nil: refusals on lines counted with tier "unknown"
	draining  atomic.Bool
	mux       *chi.Mux
}

// New builds the server and its routes.
func New(d Deps) *Server {
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = 1 << 20
	}
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if d.Ready == nil {
		d.Ready = func(context.Context) error { return nil }
	}
	if d.Backends == nil {
		d.Backends = func(context.Context) []BackendHealth { return nil }
	}
	s := &Server{svc: d.Service, log: d.Logger, metrics: d.Metrics, gatherer: d.Gatherer, ready: d.Ready, backends: d.Backends, maxBody: d.MaxBodyBytes,
		auth: newAuth(d.Auth), reconcile: d.Reconcile, ops: d.Operator, pools: d.Pools, lines: d.Lines}
	s.mux = s.routes()
	return s
}

// Handler returns the root http.Handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Routes returns the router, e.g. for chi.Walk in the OpenAPI contract test.
func (s *Server) Routes() chi.Routes { return s.mux }

// Drain makes /readyz answer 503 so load balancers stop sending new
// requests before shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	// observe wraps recoverer so that a request whose handler panicked is
	// counted with the 500 it was answered with.
	// GetHead answers HEAD on every GET route as GET without the body (RFC
	// 9110 §9.1: servers must support HEAD); monitors and `curl -I` send it.
	r.Use(s.observe, s.recoverer, s.limitBody, middleware.GetHead)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Code: CodeNotFound, Message: "no route for " + r.Method + " " + r.URL.Path})
	})
	r.MethodNotAllowed(s.methodNotAllowed)

	r.Group(func(r chi.Router) {
		r.Use(s.clientAuth)
		r.Post("/quota/apply", s.handleApply)
		r.Post("/quota/heartbeat", s.handleHeartbeat)
		r.Post("/quota/finish", s.handleFinish)
	})
	r.With(s.statusAuth).Get("/quota/status", s.handleStatus)

	r.Group(func(r chi.Router) {
		r.Use(s.adminAuth)
		r.Get("/admin/policies", s.handleListPolicies)
		r.Get("/admin/policies/{resourceName}", s.handleGetPolicy)
		r.Put("/admin/policies/{resourceName}", s.handlePutPolicy)
		r.Get("/admin/audit", s.handleAudit)
		s.operatorRoutes(r)
		s.poolRoutes(r)
		if s.reconcile != nil {
			r.Post("/admin/reconcile", s.handleReconcile)
		}
	})

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.handleReady)
	r.Get("/healthz/backends", s.handleBackends)
	if s.gatherer != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	}
	return r
}

var allMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// methodNotAllowed answers 405 with the Allow header listing the methods the
// path does take.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	// Match the path chi routed on: the escaped one when the request has
	// one ("/admin/policies/a%2Fb"), else the decoded one.
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	for _, m := range allMethods {
		// HEAD is served by the GET route (middleware.GetHead).
		if s.mux.Match(chi.NewRouteContext(), m, path) || (m == http.MethodHead && slices.Contains(allowed, http.MethodGet)) {
			allowed = append(allowed, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeJSON(w, http.StatusMethodNotAllowed, errorBody{
		Code: CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + r.URL.Path + "; use " + strings.Join(allowed, ", "),
	})
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.writeError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.maxBody {
			s.writeError(w, r, fmt.Errorf("%w: %d bytes declared, limit is %d", errBodyTooLarge, r.ContentLength, s.maxBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		next.ServeHTTP(w, r)
	})
}

func routeOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if p := rc.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
}

func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		method := r.Method
		if !isKnownMethod(method) {
			method = "other" // bounded label values
		}
		s.metrics.observeDuration(routeOf(r), method, ww.Status(), time.Since(start).Seconds())
	})
}

func isKnownMethod(m string) bool {
	for _, k := range allMethods {
		if m == k {
			return true
		}
	}
	return false
}

// handleReady answers GET /readyz: 200 while this process can answer
// requests correctly, whatever Redis and MySQL are doing (see Deps.Ready);
// 503 once draining for shutdown, or when Deps.Ready fails.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "shutting down"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func ts(t time.Time) string { return t.UTC().Format(quota.TimeFormat) }

func tsOrNil(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	v := ts(t)
	return &v
}

// resourceLabel is the resource's metric label value, or "" for a request
// whose resource has no policy or that was refused before reaching it (it
// must not create series).
func resourceLabel(name string, err error) string {
	if err != nil && (errors.Is(err, quota.ErrResourceNotFound) || isValidation(err) ||
		errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrPermissionDenied)) {
		return ""
	}
	return name
}

// errorLabel is resourceLabel for a failed request, checked further when
// the failure is the server's (5xx): it may have happened before the policy
// was read (the policy store is down), and then any well-formed name would
// create series. Such a failure is labelled only if the policy can be read
// now (from the service's cache, normally).
func (s *Server) errorLabel(r *http.Request, name string, err error) string {
	label := resourceLabel(name, err)
	if label == "" || s.svc == nil {
		return label
	}
	if status, _ := classify(err); status < 500 {
		return label
	}
	if _, perr := s.svc.Policy(r.Context(), label); perr != nil {
		return ""
	}
	return label
}

func isValidation(err error) bool {
	var ve *quota.ValidationError
	return errors.As(err, &ve)
}
