package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Operator is what the operators' endpoints use (*admin.Service): the
// session map, usage sums, the forecast and the audited admin actions.
type Operator interface {
	Sessions(ctx context.Context, q admin.SessionQuery) (admin.SessionPage, error)
	Usage(ctx context.Context, q admin.UsageQuery) (admin.Usage, error)
	Forecast(ctx context.Context, st quota.StatusResponse) (admin.Forecast, error)
	PatchPolicy(ctx context.Context, resource string, patch []byte, force bool, reason string) (quota.Policy, error)
	Reset(ctx context.Context, resource, reason string) (old, cur quota.Period, err error)
	ForceFinish(ctx context.Context, req admin.FinishRequest) (quota.FinishResponse, quota.UsageRecord, error)
	DeletePolicy(ctx context.Context, resource, reason string) (quota.Policy, error)
}

// operatorRoutes mounts the operators' endpoints on the admin group.
func (s *Server) operatorRoutes(r chi.Router) {
	r.Get("/admin/sessions", s.handleSessions)
	r.Post("/admin/sessions/{sessionId}/finish", s.handleForceFinish)
	r.Get("/admin/usage", s.handleUsage)
	r.Patch("/admin/policies/{resourceName}", s.handlePatchPolicy)
	r.Delete("/admin/policies/{resourceName}", s.handleDeletePolicy)
	r.Post("/admin/policies/{resourceName}/reset", s.handleResetPolicy)
}

// opsReady answers 501 when the server has no Operator.
func (s *Server) opsReady(w http.ResponseWriter) bool {
	if s.ops == nil {
		writeJSON(w, http.StatusNotImplemented, errorBody{Code: CodeNotImplemented, Message: "this server has no operator endpoints"})
		return false
	}
	return true
}

// strictQuery parses the query string: only the allowed names, each at most
// once. Errors: *quota.ValidationError.
func strictQuery(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &quota.ValidationError{Field: "query", Reason: "is not a valid query string"}
	}
	for k, v := range q {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, &quota.ValidationError{Field: k, Reason: "is not a known query parameter (" + strings.Join(allowed, ", ") + ")"}
		}
		if len(v) > 1 {
			return nil, &quota.ValidationError{Field: k, Reason: "is given twice"}
		}
	}
	return q, nil
}

// sessionJSON is one session of GET /admin/sessions. Times are RFC 3339
// UTC with milliseconds; amounts in the policy's unit.
type sessionJSON struct {
	SessionID      string  `json:"sessionId"`
	ResourceName   string  `json:"resourceName"`
	ClientID       string  `json:"clientId"`
	BusinessLine   string  `json:"businessLine,omitempty"`
	Status         string  `json:"status"`
	GrantedAmount  int64   `json:"grantedAmount"`
	ChargedAmount  int64   `json:"chargedAmount"`
	RefundedAmount int64   `json:"refundedAmount"`
	OverageAmount  int64   `json:"overageAmount"`
	PeriodStart    string  `json:"periodStart"`
	StartTime      string  `json:"startTime"`
	LastHeartbeat  *string `json:"lastHeartbeatAt"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
	EndTime        *string `json:"endTime"`
	AgeSeconds     float64 `json:"ageSeconds"`
	FailOpen       bool    `json:"failOpen"`
	LeakRecovered  bool    `json:"leakRecovered"`
}

func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request) {
	if !s.opsReady(w) {
		return
	}
	q, err := strictQuery(r, "resourceName", "clientId", "businessLine", "status", "limit", "cursor")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sq := admin.SessionQuery{Resource: q.Get("resourceName"), ClientID: q.Get("clientId"), Line: q.Get("businessLine"),
		Status: quota.Status(q.Get("status")), Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, ok := queryInt(v)
		if !ok || n < 1 || n > admin.MaxSessionLimit {
			s.writeError(w, r, &quota.ValidationError{Field: "limit", Reason: "must be a whole number from 1 to " + strconv.Itoa(admin.MaxSessionLimit)})
			return
		}
		sq.Limit = int(n)
	}
	page, err := s.ops.Sessions(r.Context(), sq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]sessionJSON, len(page.Sessions))
	for i, x := range page.Sessions {
		out[i] = sessionJSON{
			SessionID: x.SessionID, ResourceName: x.ResourceName, ClientID: x.ClientID, BusinessLine: x.BusinessLine, Status: string(x.Status),
			GrantedAmount: x.Granted, ChargedAmount: x.Charged, RefundedAmount: x.Refunded, OverageAmount: x.Overage,
			PeriodStart: ts(x.PeriodStart), StartTime: ts(x.StartTime), LastHeartbeat: tsOrNil(x.LastHeartbeat),
			LeaseExpiresAt: tsOrNil(x.LeaseExpiresAt), EndTime: tsOrNil(x.EndTime),
			AgeSeconds: x.Age.Truncate(time.Millisecond).Seconds(), FailOpen: x.FailOpen, LeakRecovered: x.LeakRecovered,
		}
	}
	var next *string
	if page.NextCursor != "" {
		next = &page.NextCursor
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "code": CodeSuccess, "sessions": out, "nextCursor": next})
}

// usageGroupJSON is one group of GET /admin/usage: clientId for
// groupBy=client, businessLine for groupBy=line ("" for the sessions of no
// line), start (the UTC hour or day) otherwise.
type usageGroupJSON struct {
	ClientID       *string `json:"clientId,omitempty"`
	BusinessLine   *string `json:"businessLine,omitempty"`
	Start          *string `json:"start,omitempty"`
	Sessions       int64   `json:"sessions"`
	OpenSessions   int64   `json:"openSessions"`
	LeakedSessions int64   `json:"leakedSessions"`
	GrantedAmount  int64   `json:"grantedAmount"`
	ChargedAmount  int64   `json:"chargedAmount"`
	ReservedAmount int64   `json:"reservedAmount"`
	RefundedAmount int64   `json:"refundedAmount"`
	OverageAmount  int64   `json:"overageAmount"`
}

// parseQueryTime reads an RFC 3339 timestamp query parameter ("" = zero).
func parseQueryTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, &quota.ValidationError{Field: field, Reason: "must be an RFC 3339 timestamp such as 2025-06-01T00:00:00Z"}
	}
	if t.Before(time.Unix(0, 0)) {
		// The ledger counts Unix milliseconds, and the zero time (0001-01-01)
		// stands for "not given": an earlier time is refused, not defaulted.
		return time.Time{}, &quota.ValidationError{Field: field, Reason: "must be 1970-01-01T00:00:00Z or later"}
	}
	return t, nil
}

func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	if !s.opsReady(w) {
		return
	}
	q, err := strictQuery(r, "resourceName", "from", "to", "groupBy")
	var uq admin.UsageQuery
	if err == nil {
		uq = admin.UsageQuery{Resource: q.Get("resourceName"), GroupBy: q.Get("groupBy")}
		if uq.From, err = parseQueryTime("from", q.Get("from")); err == nil {
			uq.To, err = parseQueryTime("to", q.Get("to"))
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, err := s.ops.Usage(r.Context(), uq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	groups := make([]usageGroupJSON, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = usageGroupJSON{Sessions: g.Sessions, OpenSessions: g.Open, LeakedSessions: g.Leaked,
			GrantedAmount: g.Granted, ChargedAmount: g.Charged, ReservedAmount: g.Reserved,
			RefundedAmount: g.Refunded, OverageAmount: g.Overage}
		switch k := g.Key; u.GroupBy {
		case quota.GroupByClient:
			groups[i].ClientID = &k
		case quota.GroupByLine:
			groups[i].BusinessLine = &k
		default:
			groups[i].Start = tsOrNil(g.Start)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"success": true, "code": CodeSuccess, "resourceName": u.Policy.ResourceName,
		"quotaType": u.Policy.QuotaType, "unit": u.Policy.QuotaType.Unit(),
		"from": ts(u.From), "to": ts(u.To), "groupBy": u.GroupBy, "groups": groups, "truncated": u.Truncated,
	})
}

// mergePatchType is the media type of a JSON merge patch (RFC 7396).
const mergePatchType = "application/merge-patch+json"

func (s *Server) handlePatchPolicy(w http.ResponseWriter, r *http.Request) {
	if !s.opsReady(w) {
		return
	}
	name := chi.URLParam(r, "resourceName")
	q, err := strictQuery(r, "force", "reason")
	force := false
	if err == nil {
		switch q.Get("force") {
		case "", "false":
		case "true":
			force = true
		default:
			err = &quota.ValidationError{Field: "force", Reason: "must be true or false"}
		}
	}
	var patch json.RawMessage
	if err == nil {
		// decode's checks (size, one JSON object, no duplicate names)
		// on the body alone: this endpoint's options are in the query,
		// and its media type is merge-patch.
		body := *r
		u := *r.URL
		u.RawQuery = ""
		body.URL = &u
		body.Header = r.Header.Clone()
		if ct := r.Header.Get("Content-Type"); strings.HasPrefix(strings.ToLower(ct), mergePatchType) {
			body.Header.Set("Content-Type", "application/json")
		}
		err = decode(&body, &patch)
	}
	var pp policyPools
	var only bool
	if err == nil {
		patch, pp, only, err = s.patchPolicyPools(r, name, patch)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var p quota.Policy
	if only { // nothing but "pools": the policy stays as it is
		var c admin.PoolConfig
		c, err = s.pools.Lines.Config(r.Context(), name)
		p = c.Policy
	} else {
		p, err = s.ops.PatchPolicy(r.Context(), name, patch, force, q.Get("reason"))
	}
	out := policyWithPools{PolicyView: p.View()}
	if err == nil {
		err = pp.store(s, r, name, &out)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.Known(p)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleDeletePolicy(w http.ResponseWriter, r *http.Request) {
	if !s.opsReady(w) {
		return
	}
	q, err := strictQuery(r, "reason")
	if err == nil {
		// The reason is a query parameter; a body (e.g. {"reason":…}) would
		// be dropped while the policy is deleted anyway.
		err = noBody(r)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err = s.refuseDeleteWithPools(r.Context(), chi.URLParam(r, "resourceName")); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.ops.DeletePolicy(r.Context(), chi.URLParam(r, "resourceName"), q.Get("reason"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "code": CodeSuccess, "deleted": p.View()})
}

// periodOut is a period on the wire.
type periodOut struct {
	PeriodStart string  `json:"periodStart"`
	NextResetAt *string `json:"nextResetAt"`
}

// readOptionalBody decodes a JSON body into dst; an empty body (no
// Content-Length, nothing sent) leaves dst as it is.
func readOptionalBody(r *http.Request, dst any) error {
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" && r.URL.RawQuery == "" {
		return nil
	}
	return decode(r, dst)
}

func (s *Server) handleResetPolicy(w http.ResponseWriter, r *http.Request) {
	if !s.opsReady(w) {
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := readOptionalBody(r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	name := chi.URLParam(r, "resourceName")
	old, cur, err := s.ops.Reset(r.Context(), name, body.Reason)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"success": true, "code": CodeSuccess, "resourceName": name,
		"previousPeriod": periodOut{PeriodStart: ts(old.Start), NextResetAt: tsOrNil(old.End)},
		"periodStart":    ts(cur.Start), "nextResetAt": tsOrNil(cur.End),
	})
}

func (s *Server) handleForceFinish(w http.ResponseWriter, r *http.Request) {
	if !s.opsReady(w) {
		return
	}
	var body struct {
		ResourceName string          `json:"resourceName"`
		ClientID     string          `json:"clientId"`
		Amount       json.RawMessage `json:"amount"`
		Reason       string          `json:"reason"`
	}
	req := admin.FinishRequest{SessionID: chi.URLParam(r, "sessionId")}
	err := readOptionalBody(r, &body)
	if err == nil && len(body.Amount) > 0 && string(body.Amount) != "null" {
		var n int64
		if n, err = parseAmount("amount", body.Amount, false); err == nil {
			req.Amount = &n
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req.ResourceName, req.ClientID, req.Reason = body.ResourceName, body.ClientID, body.Reason
	res, row, err := s.ops.ForceFinish(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"success": true, "code": CodeSuccess, "sessionId": res.SessionID, "resourceName": row.ResourceName,
		"quotaType": res.QuotaType, "clientId": row.ClientID, "grantedAmount": res.Granted, "chargedAmount": res.Charged,
		"refundedAmount": res.Refunded, "overageAmount": res.Overage, "remainingQuota": res.Remaining,
	})
}

// statusForecast adds the burn rate and exhaustsAt to a status answer. A
// forecast that cannot be read (Redis hiccup on the samples) leaves both
// null rather than failing the status read; it is logged at debug.
func (s *Server) statusForecast(r *http.Request, st quota.StatusResponse, out *statusResponse) {
	if s.ops == nil {
		return
	}
	f, err := s.ops.Forecast(r.Context(), st)
	if err != nil {
		s.log.Debug("forecast unavailable", zap.String("resource", st.Policy.ResourceName), zap.Error(err))
		return
	}
	out.BurnRate = f.BurnRate
	if f.ExhaustsAt != nil {
		v := ts(*f.ExhaustsAt)
		out.ExhaustsAt = &v
	}
}

// statusAuth guards GET /quota/status: a request with an admin bearer token
// and no API key is checked as an admin call (an operator may read any
// resource's status); any other goes through clientAuth.
func (s *Server) statusAuth(next http.Handler) http.Handler {
	asAdmin, asClient := s.adminAuth(next), s.clientAuth(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := bearerToken(r); ok && len(r.Header.Values(apiKeyHeader)) == 0 && len(s.auth.adminHashes) > 0 {
			asAdmin.ServeHTTP(w, r)
			return
		}
		asClient.ServeHTTP(w, r)
	})
}

// AdminSignIn checks an admin token as /admin/* does, for the web console's
// sign-in: the token's name for a configured token; with no tokens
// configured, quota.AnonymousActor for any token in dev mode and false in
// production (where /admin/* is disabled).
func (s *Server) AdminSignIn(token string) (string, bool) {
	if len(s.auth.adminHashes) == 0 {
		if s.auth.production {
			return "", false
		}
		return quota.AnonymousActor, true
	}
	return s.auth.adminName(token)
}
