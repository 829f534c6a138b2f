package httpapi

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

type applyRequest struct {
	ResourceName string          `json:"resourceName"`
	ApplyAmount  json.RawMessage `json:"applyAmount"`
	ClientID     string          `json:"clientId"`
	// SessionID is a pointer so that "" (refused) differs from absent or
	// null (the server makes one).
	SessionID *string         `json:"sessionId"`
	MinAmount json.RawMessage `json:"minAmount"`
	// Pools (internal/pools): the business line, "critical" (default
	// true; previews and debug calls send false), "continuation".
	BusinessLine string `json:"businessLine"`
	Critical     *bool  `json:"critical"`
	Continuation bool   `json:"continuation"`
}

type applyResponse struct {
	Success        bool   `json:"success"`
	Code           string `json:"code"`
	SessionID      string `json:"sessionId"`
	GrantedAmount  int64  `json:"grantedAmount"`
	RemainingQuota int64  `json:"remainingQuota"` // of the period, as finish and status answer it
	// LineRemaining: a grant on a business line: what the line could still
	// be granted after it.
	LineRemaining            *int64 `json:"lineRemaining,omitempty"`
	LeaseExpiresAt           string `json:"leaseExpiresAt"`
	HeartbeatIntervalSeconds int64  `json:"heartbeatIntervalSeconds"`
	// FailOpen: granted by a failMode OPEN policy while the center could not
	// decide; remainingQuota is then −1 (unknown).
	FailOpen bool `json:"failOpen,omitempty"`
	// Drawn: which pools the grant came from (resources with business lines
	// or temporary grants only).
	Drawn *quota.PoolSplit `json:"drawn,omitempty"`
	// QuotaTight: buffer is lent to the line now; degrade non-critical work.
	QuotaTight    bool   `json:"quotaTight,omitempty"`
	PolicyVersion string `json:"policyVersion,omitempty"`
}

func (s *Server) handleApply(w http.ResponseWriter, r *http.Request) {
	var body applyRequest
	req, err := func() (quota.ApplyRequest, error) {
		// A null "critical" or "continuation" is neither true nor false:
		// refused naming it, as "businessLine": null is; so are
		// "sessionId": null and "minAmount": null, which were taken as
		// absent (a new session id, all or nothing) where every other
		// null is refused (docs/pools.md §5, open finding 8).
		if err := decodeNoNullOf(r, &body, "businessLine", "critical", "continuation", "sessionId", "minAmount"); err != nil {
			return quota.ApplyRequest{}, err
		}
		amt, err := parseAmount("applyAmount", body.ApplyAmount, true)
		if err != nil {
			return quota.ApplyRequest{}, err
		}
		min, err := parseAmount("minAmount", body.MinAmount, false)
		if err != nil {
			return quota.ApplyRequest{}, err
		}
		if min == 0 && given(body.MinAmount) {
			// 0 would be read as "no minAmount" (all or nothing), the
			// opposite of what a caller sending it means; the contract's
			// Amount starts at 1.
			return quota.ApplyRequest{}, &quota.ValidationError{Field: "minAmount", Reason: "must be at least 1 (leave it out for all or nothing)"}
		}
		var sessionID string
		if body.SessionID != nil {
			if sessionID = *body.SessionID; sessionID == "" {
				// Read as absent, "" would make a new session on every
				// retry of a caller that believes it sent a key.
				return quota.ApplyRequest{}, &quota.ValidationError{Field: "sessionId", Reason: "must not be empty (leave it out and the server makes one)"}
			}
		}
		clientID, err := authorize(r, body.ResourceName, body.ClientID)
		if err != nil {
			return quota.ApplyRequest{}, err
		}
		line, err := authorizeLine(r, body.BusinessLine)
		if err != nil {
			return quota.ApplyRequest{}, err
		}
		return quota.ApplyRequest{
			ResourceName: body.ResourceName, Amount: amt, MinAmount: min,
			ClientID: clientID, SessionID: sessionID,
			BusinessLine: line, NonCritical: body.Critical != nil && !*body.Critical, Continuation: body.Continuation,
		}, nil
	}()
	if err == nil {
		var res quota.ApplyResponse
		res, err = s.svc.Apply(r.Context(), req)
		if err == nil {
			s.metrics.observeApply(req.ResourceName, res)
			if res.Refused() {
				tier := s.countRefusal(r.Context(), req, res)
				res, msg := s.lineRefusal(r.Context(), req, res, tier)
				s.writeRefused(w, res, msg, req.BusinessLine != "")
				return
			}
			writeAppended(w, http.StatusOK, applyResponse{
				Success: true, Code: CodeSuccess, SessionID: res.SessionID, GrantedAmount: res.Granted,
				RemainingQuota: res.Remaining, LineRemaining: res.LineRemaining, LeaseExpiresAt: ts(res.LeaseExpiresAt),
				HeartbeatIntervalSeconds: res.HeartbeatIntervalSeconds, FailOpen: res.FailOpen,
				Drawn: drawnOf(res.Drawn), QuotaTight: res.QuotaTight, PolicyVersion: res.PolicyVersion,
			})
			if res.FailOpen {
				s.log.Warn("granted fail-open", zap.String("resource", req.ResourceName),
					zap.String("session_id", res.SessionID), zap.Bool("recorded", res.FailOpenRecorded),
					zap.NamedError("cause", res.FailOpenCause))
			}
			return
		}
	}
	if label := s.errorLabel(r, body.ResourceName, err); label != "" {
		s.metrics.apply.WithLabelValues(label, failResult(err)).Inc()
	}
	s.writeError(w, r, err)
}

// writeRefused answers a refused apply: 429 QUOTA_EXHAUSTED; Retry-After
// is the whole seconds to the next reset, when the policy resets. msg,
// when not "", is the message (lineRefusal's). onLine: the apply named a
// business line, so the body gives its reason even when the resource
// itself is used up (EXHAUSTED); a plain resource's refusal has none.
func (s *Server) writeRefused(w http.ResponseWriter, res quota.ApplyResponse, msg string, onLine bool) {
	rem := res.Remaining
	body := errorBody{Code: CodeQuotaExhausted, RemainingQuota: &rem, LineRemaining: res.LineRemaining,
		Message: "quota exhausted: " + strconv.FormatInt(res.Remaining, 10) + " remaining in this period"}
	if res.Refusal.Reason != quota.RefusedExhausted || onLine {
		body.Reason = string(res.Refusal.Reason)
		body.Message = "quota exhausted: " + refusalMessage[res.Refusal.Reason]
	}
	if msg != "" {
		body.Message = msg
	}
	if next := res.Refusal.NextResetAt; !next.IsZero() {
		body.NextResetAt = ts(next)
		secs := int64(math.Ceil(time.Until(next).Seconds()))
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	writeJSON(w, http.StatusTooManyRequests, body)
}

type sessionRequest struct {
	ResourceName string `json:"resourceName"`
	SessionID    string `json:"sessionId"`
	// ClientID (optional): session ids are scoped to the client; with API
	// keys it is the key's (this must be empty or the same), without them
	// the apply's clientId (empty: sessions applied without one).
	ClientID         string          `json:"clientId"`
	ActualUsedAmount json.RawMessage `json:"actualUsedAmount,omitempty"`
}

type heartbeatResponse struct {
	Success        bool   `json:"success"`
	Code           string `json:"code"`
	SessionID      string `json:"sessionId"`
	Status         string `json:"status"`
	LeaseExpiresAt string `json:"leaseExpiresAt"`
	PolicyVersion  string `json:"policyVersion,omitempty"`
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ResourceName string `json:"resourceName"`
		SessionID    string `json:"sessionId"`
		ClientID     string `json:"clientId"` // as sessionRequest's
	}
	err := decode(r, &body)
	var clientID string
	if err == nil {
		clientID, err = authorize(r, body.ResourceName, body.ClientID)
	}
	if err == nil {
		var res quota.HeartbeatResponse
		res, err = s.svc.Heartbeat(r.Context(), body.ResourceName, body.SessionID, clientID)
		if err == nil {
			s.metrics.observeHeartbeat(body.ResourceName)
			writeAppended(w, http.StatusOK, heartbeatResponse{
				Success: true, Code: CodeSuccess, SessionID: res.SessionID,
				Status: string(res.Status), LeaseExpiresAt: ts(res.LeaseExpiresAt), PolicyVersion: res.PolicyVersion,
			})
			return
		}
	}
	if label := s.errorLabel(r, body.ResourceName, err); label != "" {
		result := failResult(err)
		switch {
		case errors.Is(err, quota.ErrSessionNotActive):
			result = "not_active"
		case errors.Is(err, quota.ErrSessionNotFound):
			result = "not_found"
		}
		s.metrics.heartbeat.WithLabelValues(label, result).Inc()
	}
	s.writeError(w, r, err)
}

type finishResponse struct {
	Success        bool   `json:"success"`
	Code           string `json:"code"`
	SessionID      string `json:"sessionId"`
	GrantedAmount  int64  `json:"grantedAmount"`
	ChargedAmount  int64  `json:"chargedAmount"`
	RefundedAmount int64  `json:"refundedAmount"`
	OverageAmount  int64  `json:"overageAmount"`
	RemainingQuota int64  `json:"remainingQuota"`
}

func (s *Server) handleFinish(w http.ResponseWriter, r *http.Request) {
	var body sessionRequest
	err := decode(r, &body)
	var actual int64
	if err == nil {
		actual, err = parseAmount("actualUsedAmount", body.ActualUsedAmount, true)
	}
	var clientID string
	if err == nil {
		clientID, err = authorize(r, body.ResourceName, body.ClientID)
	}
	if err == nil {
		var res quota.FinishResponse
		res, err = s.svc.Finish(r.Context(), quota.FinishRequest{
			ResourceName: body.ResourceName, SessionID: body.SessionID, ClientID: clientID, Actual: actual,
		})
		if err == nil {
			s.metrics.observeFinish(body.ResourceName, res)
			writeAppended(w, http.StatusOK, finishResponse{
				Success: true, Code: CodeSuccess, SessionID: res.SessionID, GrantedAmount: res.Granted,
				ChargedAmount: res.Charged, RefundedAmount: res.Refunded, OverageAmount: res.Overage,
				RemainingQuota: res.Remaining,
			})
			return
		}
	}
	if label := s.errorLabel(r, body.ResourceName, err); label != "" {
		s.metrics.finish.WithLabelValues(label, failResult(err)).Inc()
	}
	s.writeError(w, r, err)
}

type statusResponse struct {
	Success        bool    `json:"success"`
	Code           string  `json:"code"`
	ResourceName   string  `json:"resourceName"`
	QuotaType      string  `json:"quotaType"`
	TotalLimit     int64   `json:"totalLimit"`
	UsedAmount     int64   `json:"usedAmount"`
	ReservedAmount int64   `json:"reservedAmount"`
	RemainingQuota int64   `json:"remainingQuota"`
	ActiveSessions int64   `json:"activeSessions"`
	PeriodStart    string  `json:"periodStart"`
	NextResetAt    *string `json:"nextResetAt"`
	// BurnRate is consumption per second over the last 5 minutes (null
	// while unknown); ExhaustsAt when remaining reaches 0 at that rate
	// (null when the budget lasts past the next reset). See statusForecast.
	BurnRate   *float64 `json:"burnRate"`
	ExhaustsAt *string  `json:"exhaustsAt"`
	// Pools: a resource with business lines or temporary grants only.
	Pools *poolStatusJSON `json:"pools,omitempty"`
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	// strictQuery, not r.URL.Query(): that drops a malformed pair
	// ("x=%zz", "a;b") without a word and answers for the rest.
	q, err := strictQuery(r, "resourceName")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := authorize(r, q.Get("resourceName"), ""); err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := s.svc.Status(r.Context(), q.Get("resourceName"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := statusResponse{
		Success: true, Code: CodeSuccess, ResourceName: st.Policy.ResourceName,
		QuotaType: string(st.Policy.QuotaType), TotalLimit: st.Policy.TotalLimit,
		UsedAmount: st.Used, ReservedAmount: st.Reserved, RemainingQuota: st.Remaining,
		ActiveSessions: st.ActiveSessions, PeriodStart: ts(st.Period.Start), NextResetAt: tsOrNil(st.Period.End),
	}
	if resp.Pools, err = s.poolStatus(r.Context(), st.Policy.ResourceName); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.statusForecast(r, st, &resp)
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleListPolicies(w http.ResponseWriter, r *http.Request) {
	err := noQuery(r)
	var ps []quota.Policy
	if err == nil {
		ps, err = s.svc.Policies(r.Context())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]quota.PolicyView, len(ps))
	for i, p := range ps {
		out[i] = p.View()
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "code": CodeSuccess, "policies": out})
}

func (s *Server) handleGetPolicy(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	if err := noQuery(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := quota.ValidateResourceName(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.svc.Policy(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p.View())
}

type putPolicyRequest struct {
	ResourceName         string          `json:"resourceName"` // optional; must match the path
	QuotaType            string          `json:"quotaType"`
	TotalLimit           json.RawMessage `json:"totalLimit"`
	ResetCron            string          `json:"resetCron"`
	Timezone             string          `json:"timezone"`
	LeakThresholdSeconds json.RawMessage `json:"leakThresholdSeconds"`
	FailMode             string          `json:"failMode"` // CLOSED (default) or OPEN
	Pools                json.RawMessage `json:"pools"`    // optional: the pool settings (PUT …/pools), defaults for what is left out
}

func (s *Server) handlePutPolicy(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	var body putPolicyRequest
	p, err := func() (quota.Policy, error) {
		if err := quota.ValidateResourceName(name); err != nil {
			return quota.Policy{}, err
		}
		if err := decode(r, &body); err != nil {
			return quota.Policy{}, err
		}
		if body.ResourceName != "" && body.ResourceName != name {
			return quota.Policy{}, &quota.ValidationError{Field: "resourceName", Reason: "must match the path"}
		}
		limit, err := parseAmount("totalLimit", body.TotalLimit, true)
		if err != nil {
			return quota.Policy{}, err
		}
		leak, err := parseAmount("leakThresholdSeconds", body.LeakThresholdSeconds, false)
		if err != nil {
			return quota.Policy{}, err
		}
		if body.LeakThresholdSeconds != nil && leak <= 0 {
			return quota.Policy{}, &quota.ValidationError{Field: "leakThresholdSeconds", Reason: "must be at least 1"}
		}
		return quota.Policy{
			ResourceName: name, QuotaType: quota.QuotaType(body.QuotaType), TotalLimit: limit,
			ResetCron: strings.TrimSpace(body.ResetCron), Timezone: body.Timezone, LeakThresholdSeconds: leak, // a blank resetCron is "" (never resets)
			FailMode: quota.FailMode(body.FailMode),
		}, nil
	}()
	var pp policyPools
	var before pools.Settings
	if err == nil {
		// "pools" is checked before anything is written, and stored with
		// the policy in its transaction (quota.Policy.Pools), so a failure
		// leaves both as they were; a new policy's after it.
		pp, err = s.parsePolicyPools(r, name, p.TotalLimit, pools.DefaultSettings(), body.Pools, false)
	}
	if err == nil && pp.set != nil {
		before, err = s.storedSettings(r, name)
		p.Pools = pp.set
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	stored, created, err := s.svc.PutPolicy(r.Context(), p)
	out := policyWithPools{PolicyView: stored.View()}
	switch {
	case err != nil || pp.set == nil:
	case created:
		err = pp.store(s, r, name, &out)
	default:
		out.Pools = pp.set
		err = s.pools.Lines.SettingsStored(r.Context(), name, before, *pp.set)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.Known(stored)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
}
