package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// PoolAdmin serves the pools' admin endpoints, by part (each one of
// internal/admin.Pools's roles); a nil part has no endpoints. Lines nil:
// no pools at all (status and policy answers carry none either).
type PoolAdmin struct {
	Lines    PoolLines
	Grants   PoolGrants
	Reclaims PoolReclaims
}

// PoolLines is the pools' configuration: business lines, pool settings and
// the layout and live status they give.
type PoolLines interface {
	Config(ctx context.Context, resource string) (admin.PoolConfig, error)
	PutLine(ctx context.Context, resource string, l pools.LineSpec) (pools.LineLayout, bool, error)
	DeleteLine(ctx context.Context, resource, line string) error
	PutSettings(ctx context.Context, resource string, s pools.Settings) (pools.Layout, error)
	Status(ctx context.Context, resource string) (admin.PoolStatus, bool, error)
	CheckLayout(ctx context.Context, resource string, limit int64, set *pools.Settings) error
	// SettingsStored audits pool settings a policy PUT stored with the
	// policy (quota.Policy.Pools) and drops the cached pools.
	SettingsStored(ctx context.Context, resource string, before, after pools.Settings) error
}

// PoolGrants is temporary grants and buffer releases.
type PoolGrants interface {
	AddGrant(ctx context.Context, resource string, req admin.GrantRequest) (pools.GrantRecord, error)
	Grants(ctx context.Context, resource string) ([]pools.GrantRecord, error)
	VoidGrant(ctx context.Context, resource, id string) (admin.Voided, error)
	Release(ctx context.Context, resource string, req admin.GrantRequest) (pools.GrantRecord, error)
}

// PoolReclaims is the controller's reclaims (confirm, cancel) and the pool
// event stream.
type PoolReclaims interface {
	Reclaims(ctx context.Context, resource string) ([]pools.Reclaim, error)
	SetReclaim(ctx context.Context, resource, id string, confirm bool) (pools.Reclaim, error)
	Events(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error)
}

// poolRoutes adds the pools' admin endpoints to an admin router, those of
// each part that is there.
func (s *Server) poolRoutes(r chi.Router) {
	if s.pools.Lines == nil {
		return
	}
	r.Get("/admin/policies/{resourceName}/lines", s.handleLines)
	r.Put("/admin/policies/{resourceName}/lines/{line}", s.handlePutLine)
	r.Delete("/admin/policies/{resourceName}/lines/{line}", s.handleDeleteLine)
	r.Get("/admin/policies/{resourceName}/pools", s.handleLines)
	r.Put("/admin/policies/{resourceName}/pools", s.handlePutPools)
	if s.pools.Grants != nil {
		r.Post("/admin/policies/{resourceName}/grants", s.handleGrantOf(false))
		r.Get("/admin/policies/{resourceName}/grants", s.handleGrants)
		r.Delete("/admin/policies/{resourceName}/grants/{id}", s.handleVoidGrant)
		r.Post("/admin/policies/{resourceName}/buffer/release", s.handleGrantOf(true))
	}
	if s.pools.Reclaims != nil {
		r.Get("/admin/policies/{resourceName}/reclaims", s.handleReclaims)
		r.Post("/admin/policies/{resourceName}/reclaims/{id}/confirm", s.handleReclaimStep(true))
		r.Post("/admin/policies/{resourceName}/reclaims/{id}/cancel", s.handleReclaimStep(false))
		r.Get("/admin/policies/{resourceName}/pool-events", s.handlePoolEvents)
	}
}

type lineJSON struct {
	BusinessLine string     `json:"businessLine"`
	Tier         pools.Tier `json:"tier"`
	Weight       int64      `json:"weight,omitempty"`
	Dedicated    int64      `json:"dedicated"` // the part it holds (explicit or by weight)
	BorrowCap    int64      `json:"borrowLimit"`
}

type poolsJSON struct {
	Success  bool           `json:"success"`
	Code     string         `json:"code"`
	Resource string         `json:"resourceName"`
	Settings pools.Settings `json:"pools"`
	Shared   int64          `json:"shared"`
	Dedic    int64          `json:"dedicated"`
	Buffer   int64          `json:"buffer"`
	Lines    []lineJSON     `json:"lines"`
}

func linesJSON(c admin.PoolConfig) []lineJSON {
	w := map[string]int64{}
	for _, l := range c.Lines {
		w[l.Name] = l.Weight
	}
	out := make([]lineJSON, 0, len(c.Layout.Lines))
	for _, l := range c.Layout.Lines {
		out = append(out, lineJSON{BusinessLine: l.Name, Tier: l.Tier, Weight: w[l.Name], Dedicated: l.Dedicated, BorrowCap: l.BorrowCap})
	}
	return out
}

func (s *Server) writePools(w http.ResponseWriter, r *http.Request, status int) {
	c, err := s.pools.Lines.Config(r.Context(), chi.URLParam(r, "resourceName"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, status, poolsJSON{Success: true, Code: CodeSuccess, Resource: c.Policy.ResourceName, Settings: c.Settings,
		Shared: c.Layout.Shared, Dedic: c.Layout.Dedicated, Buffer: c.Layout.Buffer, Lines: linesJSON(c)})
}

// handleLines answers GET …/lines and GET …/pools: the settings, the
// pools' sizes and every line.
func (s *Server) handleLines(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writePools(w, r, http.StatusOK)
}

func (s *Server) handlePutLine(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Tier      pools.Tier      `json:"tier"`
		Weight    json.RawMessage `json:"weight"`
		Dedicated json.RawMessage `json:"dedicated"`
	}
	err := decodeNoNull(r, &body)
	var spec pools.LineSpec
	if err == nil {
		spec = pools.LineSpec{Name: chi.URLParam(r, "line"), Tier: body.Tier}
		if spec.Weight, err = parseAmount("weight", body.Weight, false); err == nil {
			spec.Dedicated, err = parseAmount("dedicated", body.Dedicated, false)
		} else if ve := (*quota.ValidationError)(nil); errors.As(err, &ve) && (ve.Reason == "must be at most 2^53-1" || ve.Reason == reasonWholeNumber) {
			// A weight past 2^53-1 is out of the weight's own range, which
			// is what the caller needs to hear (not the amounts' bound).
			err = &quota.ValidationError{Field: "weight", Reason: "must be a whole number 1 … 1000"}
		}
		switch {
		case err == nil && spec.Weight == 0 && spec.Dedicated == 0 && given(body.Dedicated):
			// "dedicated":0 without a weight: the amount is what is wrong,
			// not the weight it was not given.
			err = &quota.ValidationError{Field: "dedicated", Reason: "must be 1 … 2^53-1 (or give a weight instead)"}
		case err == nil && spec.Weight == 0 && spec.Dedicated == 0 && len(body.Weight) == 0 && len(body.Dedicated) == 0:
			spec.Weight = 1 // neither given: the documented default, weight 1
		}
	}
	if err == nil {
		err = lineNameHasAlnum(spec.Name)
	}
	if err == nil {
		var created bool
		if _, created, err = s.pools.Lines.PutLine(r.Context(), chi.URLParam(r, "resourceName"), spec); err == nil {
			status := http.StatusOK
			if created {
				status = http.StatusCreated
			}
			s.writePools(w, r, status)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) handleDeleteLine(w http.ResponseWriter, r *http.Request) {
	err := noInput(r)
	if err == nil {
		err = s.pools.Lines.DeleteLine(r.Context(), chi.URLParam(r, "resourceName"), chi.URLParam(r, "line"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writePools(w, r, http.StatusOK)
}

func (s *Server) handleReclaims(w http.ResponseWriter, r *http.Request) {
	err := noQuery(r)
	var rs []pools.Reclaim
	if err == nil {
		rs, err = s.pools.Reclaims.Reclaims(r.Context(), chi.URLParam(r, "resourceName"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Success  bool            `json:"success"`
		Code     string          `json:"code"`
		Reclaims []pools.Reclaim `json:"reclaims"`
	}{true, CodeSuccess, rs})
}

// handleReclaimStep answers POST …/reclaims/{id}/confirm and …/cancel; an
// optional ?reason= is the audit entry's reason.
func (s *Server) handleReclaimStep(confirm bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := strictQuery(r, "reason")
		if err == nil {
			err = quota.ValidateReason(q.Get("reason"))
		}
		if err == nil {
			err = noBody(r)
		}
		var rc pools.Reclaim
		if err == nil {
			ctx := quota.WithReason(r.Context(), q.Get("reason"))
			rc, err = s.pools.Reclaims.SetReclaim(ctx, chi.URLParam(r, "resourceName"), chi.URLParam(r, "id"), confirm)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, struct {
			Success bool          `json:"success"`
			Code    string        `json:"code"`
			Reclaim pools.Reclaim `json:"reclaim"`
		}{true, CodeSuccess, rc})
	}
}

func (s *Server) handlePoolEvents(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r, "limit")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			s.writeError(w, r, &quota.ValidationError{Field: "limit", Reason: "must be 1 … 500"})
			return
		}
		limit = n
	}
	evs, err := s.pools.Reclaims.Events(r.Context(), chi.URLParam(r, "resourceName"), limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Success bool              `json:"success"`
		Code    string            `json:"code"`
		Events  []pools.PoolEvent `json:"events"`
	}{true, CodeSuccess, evs})
}

// drawnOf is an apply answer's "drawn" (what the grant took from each
// pool: quota.PoolSplit's JSON) for a grant that drew from a line's pools
// or a temporary grant, nil for any other.
func drawnOf(d quota.PoolSplit) *quota.PoolSplit {
	if !d.Pooled() {
		return nil
	}
	p := new(quota.PoolSplit) // only a pools' grant puts one on the heap (&d would move d there on every call)
	*p = d
	return p
}

var refusalMessage = map[quota.RefusalReason]string{
	quota.RefusedLineExhausted: "the business line has used all it may use (dedicated part, borrowing limit, buffer lent, grants)",
	quota.RefusedWatermark:     "the business line is above its tier's reject watermark; retry later, or send critical work",
	quota.RefusedPoolExhausted: "the shared pool is used up; the line may not borrow more now",
	quota.RefusedExhausted:     "the resource itself is used up in this period, for every line",
}

// authorizeLine checks an apply's businessLine against its API key's line
// binding (a key bound to a line may only apply for it; an apply that names
// none is taken as that line's). Errors: ErrPermissionDenied (403).
func authorizeLine(r *http.Request, line string) (string, error) {
	k, _ := r.Context().Value(clientKeyCtx{}).(*clientKey)
	if k == nil || k.line == "" {
		return line, nil
	}
	if line != "" && line != k.line {
		return "", denied("this API key may only apply for business line " + strconv.Quote(k.line))
	}
	return k.line, nil
}

// poolStatusJSON is GET /quota/status's "pools".
type poolStatusJSON struct {
	Shared       int64            `json:"shared"`
	SharedUsed   int64            `json:"sharedUsed"`
	SharedBuffer int64            `json:"sharedBuffer"` // buffer released to the shared pool
	Buffer       int64            `json:"buffer"`
	BufferFree   int64            `json:"bufferFree"`
	Elasticity   pools.Elasticity `json:"elasticity"`
	Lines        []lineStatusJSON `json:"lines"`
	Grants       []grantJSON      `json:"grants"`
}

type lineStatusJSON struct {
	BusinessLine string     `json:"businessLine"`
	Tier         pools.Tier `json:"tier"`
	Dedicated    int64      `json:"dedicated"` // held now: layout − lent + reclaimed
	Used         int64      `json:"used"`      // reserved + charged in this period, grants included
	Reserved     int64      `json:"reserved"`  // held by open sessions (part of used)
	Borrowed     int64      `json:"borrowed"`  // held from the shared pool
	BorrowLimit  int64      `json:"borrowLimit"`
	Lent         int64      `json:"lent"`      // moved away by reclaim
	Reclaimed    int64      `json:"reclaimed"` // moved here by reclaim
	Buffer       int64      `json:"buffer"`    // buffer lent to it
	MayUse       int64      `json:"mayUse"`
	Watermark    float64    `json:"watermarkPercent"`
	Mode         pools.Mode `json:"elasticityMode"` // PREDICTIVE, REACTIVE or OFF
}

func (s *Server) poolStatus(ctx context.Context, resource string) (*poolStatusJSON, error) {
	if s.pools.Lines == nil {
		return nil, nil
	}
	st, ok, err := s.pools.Lines.Status(ctx, resource)
	if err != nil || !ok {
		return nil, err
	}
	m := st.Model
	out := &poolStatusJSON{Shared: st.Layout.Shared, SharedUsed: m.SharedUsed, SharedBuffer: m.SharedBuffer,
		Buffer: st.Layout.Buffer, BufferFree: m.BufferFree(), Elasticity: st.Settings.Elasticity,
		Lines: []lineStatusJSON{}, Grants: []grantJSON{}}
	for _, ll := range st.Layout.Lines {
		l := m.Lines[ll.Name]
		out.Lines = append(out.Lines, lineStatusJSON{BusinessLine: l.Name, Tier: l.Tier, Dedicated: l.OwnDedicated(),
			Used: l.Used() + l.UsedGrant, Borrowed: l.UsedShared, BorrowLimit: l.BorrowCap, Lent: l.Lent, Reclaimed: l.Reclaimed,
			Buffer: l.Buffer, MayUse: m.Reach(l), Watermark: float64(l.Watermark) / 100,
			Reserved: st.Reserved[l.Name], Mode: st.Settings.ModeOf(l.Mode)})
	}
	now := time.Now().UnixMilli()
	for _, g := range st.Grants {
		if g.Active(now) {
			out.Grants = append(out.Grants, toGrantJSON(g, now))
		}
	}
	return out, nil
}
