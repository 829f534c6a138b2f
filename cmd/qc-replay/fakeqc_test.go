package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fakeQC is an in-memory quota-center: policies, a real balance per
// resource and idempotent sessions, enough for qc-replay.
type fakeQC struct {
	t          *testing.T
	apiKey     string
	adminToken string

	// Faults.
	bug           string // "charge-granted": finish charges the grant; "keep-reserved": finish leaves the reservation
	lostEvery     int    // every n-th apply and finish does its work, then answers 503 (a lost answer)
	finishDown    bool   // every finish answers 503 without doing anything
	periodStart   time.Time
	policyCreated map[string]time.Time

	mu       sync.Mutex
	limits   map[string]int64
	used     map[string]int64
	reserved map[string]int64
	sessions map[string]*fakeSession
	applies  int
	finishes int
	seenKeys map[string]int // X-API-Key values seen on /quota/*
}

type fakeSession struct {
	resource        string
	amount, granted int64
	clientID        string
	applyResp       map[string]any
	finished        bool
	actual          int64
	finishResp      map[string]any
	applyHTTPCalls  int
	finishHTTPCalls int
}

func newFakeQC(t *testing.T) (*fakeQC, *httptest.Server) {
	f := &fakeQC{
		t:             t,
		periodStart:   time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC),
		policyCreated: map[string]time.Time{},
		limits:        map[string]int64{},
		used:          map[string]int64{},
		reserved:      map[string]int64{},
		sessions:      map[string]*fakeSession{},
		seenKeys:      map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /quota/apply", f.quota(f.apply))
	mux.HandleFunc("POST /quota/finish", f.quota(f.finish))
	mux.HandleFunc("GET /quota/status", f.quota(f.status))
	mux.HandleFunc("PUT /admin/policies/{resourceName}", f.putPolicy)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 404, "NOT_FOUND", "no route "+r.URL.Path, nil)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"success": false, "code": code, "message": msg}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

// quota wraps a client endpoint: API key, JSON content type, lock.
func (f *fakeQC) quota(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seenKeys[r.Header.Get("X-API-Key")]++
		if f.apiKey != "" && r.Header.Get("X-API-Key") != f.apiKey {
			writeErr(w, 401, "UNAUTHENTICATED", "bad API key", nil)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
			writeErr(w, 415, "UNSUPPORTED_MEDIA_TYPE", "want JSON", nil)
			return
		}
		h(w, r)
	}
}

func (f *fakeQC) apply(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ResourceName string `json:"resourceName"`
		ApplyAmount  int64  `json:"applyAmount"`
		ClientID     string `json:"clientId"`
		SessionID    string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ApplyAmount < 1 || req.SessionID == "" {
		writeErr(w, 400, "INVALID_ARGUMENT", fmt.Sprintf("bad apply %+v: %v", req, err), nil)
		return
	}
	limit, ok := f.limits[req.ResourceName]
	if !ok {
		writeErr(w, 404, "RESOURCE_NOT_FOUND", "no policy", nil)
		return
	}
	f.applies++
	lost := f.lostEvery > 0 && f.applies%f.lostEvery == 0
	if s, ok := f.sessions[req.SessionID]; ok {
		s.applyHTTPCalls++
		if s.resource != req.ResourceName || s.amount != req.ApplyAmount || s.clientID != req.ClientID {
			writeErr(w, 409, "SESSION_CONFLICT", "session reused", nil)
			return
		}
		writeJSON(w, 200, s.applyResp) // replay: nothing reserved again
		return
	}
	remaining := limit - f.used[req.ResourceName] - f.reserved[req.ResourceName]
	if req.ApplyAmount > remaining {
		writeErr(w, 429, "QUOTA_EXHAUSTED", "not enough quota", map[string]any{"remainingQuota": remaining})
		return
	}
	f.reserved[req.ResourceName] += req.ApplyAmount
	resp := map[string]any{
		"success": true, "code": "SUCCESS", "sessionId": req.SessionID, "grantedAmount": req.ApplyAmount,
		"remainingQuota": remaining - req.ApplyAmount, "leaseExpiresAt": time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339),
		"heartbeatIntervalSeconds": 100,
	}
	f.sessions[req.SessionID] = &fakeSession{resource: req.ResourceName, amount: req.ApplyAmount, granted: req.ApplyAmount,
		clientID: req.ClientID, applyResp: resp, applyHTTPCalls: 1}
	if lost {
		writeErr(w, 503, "BACKEND_UNAVAILABLE", "answer lost", nil)
		return
	}
	writeJSON(w, 200, resp)
}

func (f *fakeQC) finish(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ResourceName     string `json:"resourceName"`
		SessionID        string `json:"sessionId"`
		ActualUsedAmount *int64 `json:"actualUsedAmount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ActualUsedAmount == nil {
		writeErr(w, 400, "INVALID_ARGUMENT", "bad finish", nil)
		return
	}
	if f.finishDown {
		writeErr(w, 503, "BACKEND_UNAVAILABLE", "redis down", nil)
		return
	}
	s, ok := f.sessions[req.SessionID]
	if !ok || s.resource != req.ResourceName {
		writeErr(w, 404, "SESSION_NOT_FOUND", "no session", nil)
		return
	}
	s.finishHTTPCalls++
	actual := *req.ActualUsedAmount
	if s.finished {
		if actual != s.actual {
			writeErr(w, 409, "SESSION_CONFLICT", "other actual", nil)
			return
		}
		writeJSON(w, 200, s.finishResp)
		return
	}
	f.finishes++
	lost := f.lostEvery > 0 && f.finishes%f.lostEvery == 0
	charged := actual
	if f.bug == "charge-granted" {
		charged = s.granted
	}
	f.used[s.resource] += charged
	if f.bug != "keep-reserved" {
		f.reserved[s.resource] -= s.granted
	}
	s.finished, s.actual = true, actual
	s.finishResp = map[string]any{
		"success": true, "code": "SUCCESS", "sessionId": req.SessionID, "grantedAmount": s.granted,
		"chargedAmount": actual, "refundedAmount": max(s.granted-actual, 0), "overageAmount": max(actual-s.granted, 0),
		"remainingQuota": f.limits[s.resource] - f.used[s.resource] - f.reserved[s.resource],
	}
	if lost {
		writeErr(w, 503, "BACKEND_UNAVAILABLE", "answer lost", nil)
		return
	}
	writeJSON(w, 200, s.finishResp)
}

func (f *fakeQC) status(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("resourceName")
	limit, ok := f.limits[name]
	if !ok {
		writeErr(w, 404, "RESOURCE_NOT_FOUND", "no policy", nil)
		return
	}
	active := 0
	for _, s := range f.sessions {
		if s.resource == name && !s.finished {
			active++
		}
	}
	writeJSON(w, 200, map[string]any{
		"success": true, "code": "SUCCESS", "resourceName": name, "quotaType": "TOKENS", "totalLimit": limit,
		"usedAmount": f.used[name], "reservedAmount": f.reserved[name],
		"remainingQuota": limit - f.used[name] - f.reserved[name], "activeSessions": active,
		"periodStart": f.periodStart.Format(time.RFC3339), "nextResetAt": nil,
	})
}

func (f *fakeQC) putPolicy(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.adminToken != "" && r.Header.Get("Authorization") != "Bearer "+f.adminToken {
		writeErr(w, 401, "UNAUTHENTICATED", "bad token", nil)
		return
	}
	var spec struct {
		QuotaType  string  `json:"quotaType"`
		TotalLimit int64   `json:"totalLimit"`
		ResetCron  *string `json:"resetCron"`
	}
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil || spec.QuotaType != "TOKENS" || spec.TotalLimit < 1 ||
		spec.ResetCron == nil || *spec.ResetCron != "" {
		writeErr(w, 400, "INVALID_ARGUMENT", "bad policy", nil)
		return
	}
	name := r.PathValue("resourceName")
	status := 200
	if _, ok := f.policyCreated[name]; !ok {
		status = 201
		f.policyCreated[name] = time.Now().UTC()
	}
	f.limits[name] = spec.TotalLimit
	writeJSON(w, status, map[string]any{
		"resourceName": name, "quotaType": spec.QuotaType, "totalLimit": spec.TotalLimit, "resetCron": "",
		"timezone": "UTC", "leakThresholdSeconds": 300,
		"createdAt": f.policyCreated[name].Format(time.RFC3339Nano), "updatedAt": time.Now().UTC().Format(time.RFC3339Nano),
	})
}

// seed creates a policy directly, with some prior usage.
func (f *fakeQC) seed(resource string, limit, used int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits[resource] = limit
	f.used[resource] = used
	f.policyCreated[resource] = time.Now()
}
