package httpapi

// The pools' grants and buffer releases on the wire: their JSON, the
// bodies of POST …/grants and …/buffer/release, the listing and the void.

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

type grantJSON struct {
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	BusinessLine string `json:"businessLine,omitempty"`
	Amount       int64  `json:"amount"`
	Used         int64  `json:"used"`
	EffectiveAt  string `json:"effectiveAt"`
	ExpiresAt    string `json:"expiresAt,omitempty"`
	Reason       string `json:"reason"`
	CreatedAt    string `json:"createdAt"`
	VoidedAt     string `json:"voidedAt,omitempty"`
	Active       bool   `json:"active"`
	// Held, of a buffer release only, is what its line (or the shared
	// pool) still holds of it now (pools.ReleasesHeld): below amount once
	// a spare move lent the rest on; 0 once voided.
	Held *int64 `json:"held,omitempty"`
}

func toGrantJSON(g pools.GrantRecord, now int64) grantJSON {
	j := grantJSON{ID: g.ID, Kind: string(g.Kind), BusinessLine: g.Line, Amount: g.Amount, Used: g.Used,
		EffectiveAt: ts(time.UnixMilli(g.EffectiveMs)), Reason: g.Reason, CreatedAt: ts(time.UnixMilli(g.CreatedMs)),
		Active: g.Active(now)}
	if g.ExpiresMs < pools.MaxAmount {
		j.ExpiresAt = ts(time.UnixMilli(g.ExpiresMs))
	}
	if g.VoidedMs != 0 {
		j.VoidedAt = ts(time.UnixMilli(g.VoidedMs))
	}
	if g.Kind == pools.KindRelease {
		held := g.Held
		j.Held = &held
	}
	return j
}

// decodeGrant reads the body of POST …/grants (release false) or POST
// …/buffer/release (release true). A release lends the buffer at once, so
// it takes no effectiveAt (one was accepted, answered "active": false, and
// the buffer moved all the same). Errors: *quota.ValidationError.
func (s *Server) decodeGrant(r *http.Request, release bool) (admin.GrantRequest, error) {
	var body struct {
		Amount       json.RawMessage `json:"amount"`
		BusinessLine string          `json:"businessLine"`
		EffectiveAt  *string         `json:"effectiveAt"`
		ExpiresAt    string          `json:"expiresAt"`
		Reason       *string         `json:"reason"`
	}
	var g admin.GrantRequest
	err := decodeNoNull(r, &body)
	if err == nil && body.Reason != nil && strings.TrimSpace(*body.Reason) == "" {
		// A reason sent empty or blank says nothing: refused, as a
		// missing field of the audit would be (docs/pools.md §5, open
		// finding 8: "" was stored). Left out, the grant has none.
		err = &quota.ValidationError{Field: "reason", Reason: "must not be empty or only whitespace (leave it out, or say why)"}
	}
	if err == nil && release && body.EffectiveAt != nil {
		err = &quota.ValidationError{Field: "effectiveAt", Reason: "is not taken by a buffer release (it lends the buffer now)"}
	}
	if err == nil {
		g.Amount, err = parseAmount("amount", body.Amount, true)
	}
	if err == nil && body.EffectiveAt != nil {
		g.EffectiveMs, err = parseTime("effectiveAt", *body.EffectiveAt)
	}
	if err == nil {
		g.ExpiresMs, err = parseTime("expiresAt", body.ExpiresAt)
	}
	g.Line = body.BusinessLine
	if body.Reason != nil {
		g.Reason = *body.Reason
	}
	return g, err
}

// handleGrantOf answers POST …/grants (release false) and POST
// …/buffer/release (release true): 201 with the record under key.
func (s *Server) handleGrantOf(release bool) http.HandlerFunc {
	add, key := s.pools.Grants.AddGrant, "grant"
	if release {
		add, key = s.pools.Grants.Release, "release"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		g, err := s.decodeGrant(r, release)
		if err == nil {
			var rec pools.GrantRecord
			if rec, err = add(r.Context(), chi.URLParam(r, "resourceName"), g); err == nil {
				writeJSON(w, http.StatusCreated, map[string]any{"success": true, "code": CodeSuccess,
					key: toGrantJSON(rec, time.Now().UnixMilli())})
				return
			}
		}
		s.writeError(w, r, err)
	}
}

func (s *Server) handleGrants(w http.ResponseWriter, r *http.Request) {
	err := noQuery(r)
	var gs []pools.GrantRecord
	if err == nil {
		gs, err = s.pools.Grants.Grants(r.Context(), chi.URLParam(r, "resourceName"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := time.Now().UnixMilli()
	out := make([]grantJSON, 0, len(gs))
	for _, g := range gs {
		out = append(out, toGrantJSON(g, now))
	}
	writeJSON(w, http.StatusOK, struct {
		Success bool        `json:"success"`
		Code    string      `json:"code"`
		Grants  []grantJSON `json:"grants"`
	}{true, CodeSuccess, out})
}

// handleVoidGrant answers DELETE …/grants/{id}; an optional ?reason= is
// the audit entry's reason, as for the other destructive admin steps
// (DELETE /admin/policies/{r}, the reclaim steps). It takes no body. The
// answer gives the kind voided (GRANT, RELEASE; absent for an expired one)
// and, for a release, the buffer it gave back (returned).
func (s *Server) handleVoidGrant(w http.ResponseWriter, r *http.Request) {
	var v admin.Voided
	q, err := strictQuery(r, "reason")
	if err == nil {
		err = quota.ValidateReason(q.Get("reason"))
	}
	if err == nil {
		err = noBody(r)
	}
	if err == nil {
		ctx := quota.WithReason(r.Context(), q.Get("reason"))
		v, err = s.pools.Grants.VoidGrant(ctx, chi.URLParam(r, "resourceName"), chi.URLParam(r, "id"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A release's void says what it gave back (returned); a grant's has
	// nothing to give back.
	var returned *int64
	if v.Kind == pools.KindRelease {
		returned = &v.Returned
	}
	writeJSON(w, http.StatusOK, struct {
		Success  bool   `json:"success"`
		Code     string `json:"code"`
		Kind     string `json:"kind,omitempty"`
		Returned *int64 `json:"returned,omitempty"`
	}{true, CodeSuccess, string(v.Kind), returned})
}
