package client_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
)

// fakeCenter is a small in-memory stand-in for quota-center (apply,
// heartbeat, finish, status on one resource) for the examples and unit
// tests of this module; the SDK's tests against the real service are in
// internal/sdktest of the main module.
type fakeCenter struct {
	*httptest.Server
	mu       sync.Mutex
	qtype    string
	limit    int64
	used     int64
	sessions map[string]int64 // open session → granted
	done     map[string]int64 // finished session → charged
	calls    int
}

func newFakeCenter(qtype string, limit int64) *fakeCenter {
	f := &fakeCenter{qtype: qtype, limit: limit, sessions: map[string]int64{}, done: map[string]int64{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *fakeCenter) reserved() int64 {
	var n int64
	for _, g := range f.sessions {
		n += g
	}
	return n
}

func (f *fakeCenter) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	var in struct {
		SessionID        string `json:"sessionId"`
		ApplyAmount      int64  `json:"applyAmount"`
		MinAmount        int64  `json:"minAmount"`
		ActualUsedAmount int64  `json:"actualUsedAmount"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	answer := func(code int, v map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch r.URL.Path {
	case "/quota/apply":
		if g, ok := f.sessions[in.SessionID]; ok {
			answer(200, map[string]any{"sessionId": in.SessionID, "grantedAmount": g, "heartbeatIntervalSeconds": 1, "policyVersion": "v1"})
			return
		}
		if _, ok := f.done[in.SessionID]; ok {
			answer(409, map[string]any{"code": "SESSION_NOT_ACTIVE", "message": "session finished", "status": "FINISHED"})
			return
		}
		free := f.limit - f.used - f.reserved()
		g := min(in.ApplyAmount, free)
		if g < in.ApplyAmount && (in.MinAmount == 0 || g < in.MinAmount) {
			answer(429, map[string]any{"code": "QUOTA_EXHAUSTED", "message": "quota exhausted", "remainingQuota": free})
			return
		}
		f.sessions[in.SessionID] = g
		answer(200, map[string]any{"sessionId": in.SessionID, "grantedAmount": g, "remainingQuota": free - g, "heartbeatIntervalSeconds": 1, "policyVersion": "v1"})
	case "/quota/heartbeat":
		if _, ok := f.sessions[in.SessionID]; !ok {
			answer(404, map[string]any{"code": "SESSION_NOT_FOUND", "message": "no such session"})
			return
		}
		answer(200, map[string]any{"sessionId": in.SessionID, "status": "USING", "policyVersion": "v1"})
	case "/quota/finish":
		g, ok := f.sessions[in.SessionID]
		if !ok {
			if c, ok := f.done[in.SessionID]; ok {
				answer(200, map[string]any{"sessionId": in.SessionID, "chargedAmount": c})
				return
			}
			answer(404, map[string]any{"code": "SESSION_NOT_FOUND", "message": "no such session"})
			return
		}
		delete(f.sessions, in.SessionID)
		f.done[in.SessionID] = in.ActualUsedAmount
		f.used += in.ActualUsedAmount
		answer(200, map[string]any{"sessionId": in.SessionID, "grantedAmount": g, "chargedAmount": in.ActualUsedAmount,
			"refundedAmount": max(0, g-in.ActualUsedAmount), "overageAmount": max(0, in.ActualUsedAmount-g)})
	case "/quota/status":
		answer(200, map[string]any{"resourceName": r.URL.Query().Get("resourceName"), "quotaType": f.qtype, "totalLimit": f.limit,
			"usedAmount": f.used, "reservedAmount": f.reserved(), "activeSessions": len(f.sessions)})
	default:
		answer(404, map[string]any{"code": "NOT_FOUND", "message": "no route"})
	}
}
