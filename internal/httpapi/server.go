package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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

// Deps is what the HTTP layer needs.
type Deps struct {
	Service  *quota.Service
	Logger   *zap.Logger
	Metrics  *Metrics
	Gatherer prometheus.Gatherer // serves /metrics
	// Ready reports whether the backends answer; /readyz is 503 when it fails.
	Ready func(ctx context.Context) error
	// MaxBodyBytes caps request bodies (413 beyond it); default 1 MiB.
	MaxBodyBytes int64
}

// Server is the HTTP API. Handler returns its routes.
type Server struct {
	svc      *quota.Service
	log      *zap.Logger
	metrics  *Metrics
	gatherer prometheus.Gatherer
	ready    func(ctx context.Context) error
	maxBody  int64
	draining atomic.Bool
	mux      *chi.Mux
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
	s := &Server{svc: d.Service, log: d.Logger, metrics: d.Metrics, gatherer: d.Gatherer, ready: d.Ready, maxBody: d.MaxBodyBytes}
	s.mux = s.routes()
	return s
}

// Handler returns the root http.Handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Drain makes /readyz answer 503 so load balancers stop sending new
// requests before shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(s.recoverer, s.observe, s.limitBody)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Code: CodeNotFound, Message: "no route for " + r.Method + " " + r.URL.Path})
	})
	r.MethodNotAllowed(s.methodNotAllowed)

	r.Post("/quota/apply", s.handleApply)
	r.Post("/quota/heartbeat", s.handleHeartbeat)
	r.Post("/quota/finish", s.handleFinish)
	r.Get("/quota/status", s.handleStatus)

	r.Get("/admin/policies", s.handleListPolicies)
	r.Get("/admin/policies/{resourceName}", s.handleGetPolicy)
	r.Put("/admin/policies/{resourceName}", s.handlePutPolicy)

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.handleReady)
	if s.gatherer != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	}
	return r
}

var allMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// methodNotAllowed answers 405 with the Allow header listing the methods the
// path does take.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range allMethods {
		if s.mux.Match(chi.NewRouteContext(), m, r.URL.Path) {
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
				if v == http.ErrAbortHandler {
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
		s.metrics.duration.WithLabelValues(routeOf(r), method, strconv.Itoa(ww.Status())).Observe(time.Since(start).Seconds())
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

// timeFormat is RFC 3339 in UTC with milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func ts(t time.Time) string { return t.UTC().Format(timeFormat) }

func tsOrNil(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	v := ts(t)
	return &v
}

// resourceLabel is the resource's metric label value, or "" for a request
// whose resource has no policy (it must not create series).
func resourceLabel(name string, err error) string {
	if err != nil && (errors.Is(err, quota.ErrResourceNotFound) || isValidation(err)) {
		return ""
	}
	return name
}

func isValidation(err error) bool {
	var ve *quota.ValidationError
	return errors.As(err, &ve)
}
