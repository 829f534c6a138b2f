package httpapi

import (
	"context"
	"net/http"
	"time"
)

// BackendHealth is one backend on /healthz/backends.
type BackendHealth struct {
	Name    string // "redis" or "mysql"
	Up      bool   // it answered a ping just now
	Breaker string // its circuit breaker: "closed", "half-open" or "open"
}

type backendJSON struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // up, down
	Breaker string `json:"breaker"`
}

// handleBackends answers GET /healthz/backends: each backend's ping and
// breaker state, 200 when every backend is up, 503 when one is down. It is
// for people and monitors (a blackbox probe, a status page), never for a
// load balancer or a readiness probe: an instance with a backend down still
// answers correctly. The body names no address or driver error (the log
// has them).
func (s *Server) handleBackends(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	code, status := http.StatusOK, "ok"
	list := []backendJSON{}
	for _, b := range s.backends(ctx) {
		st := "up"
		if !b.Up {
			st, code, status = "down", http.StatusServiceUnavailable, "degraded"
		}
		list = append(list, backendJSON{Name: b.Name, Status: st, Breaker: b.Breaker})
	}
	writeJSON(w, code, map[string]any{"status": status, "backends": list})
}
