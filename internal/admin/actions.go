package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/strictjson"
)

// patchable is the policy document a merge patch applies to: the fields a
// PUT takes, by their API names. resourceName, createdAt and updatedAt are
// read-only.
type patchable struct {
	QuotaType            *string         `json:"quotaType"` // nil: removed (null), refused as required
	TotalLimit           json.RawMessage `json:"totalLimit"`
	ResetCron            string          `json:"resetCron"`
	Timezone             string          `json:"timezone"`
	LeakThresholdSeconds json.RawMessage `json:"leakThresholdSeconds"`
	FailMode             string          `json:"failMode"`
}

// PatchPolicy applies a JSON merge patch (RFC 7396) to the policy of
// resource and stores the result like PUT does (audited as policy.put with
// reason). A member set to null takes the PUT default: resetCron null never
// resets, timezone UTC, leakThresholdSeconds 300, failMode CLOSED; quotaType
// and totalLimit have none, so null is refused, for either with the reason
// "is required (null removes it)". A patch that changes nothing ({}, or the
// stored values) stores nothing new: see quota.Service.PutPolicy. Changing quotaType while the
// current period has usage (charged or reserved) reinterprets that usage in
// another unit and is refused unless force.
//
// Errors: *quota.ValidationError (a patch that is not a JSON object, names
// an unknown or read-only member, or makes the policy invalid; nothing is
// stored), quota.ErrResourceNotFound, ErrInUse (409), quota.ErrUnavailable.
func (s *Service) PatchPolicy(ctx context.Context, resource string, patch []byte, force bool, reason string) (quota.Policy, error) {
	if err := quota.ValidateResourceName(resource); err != nil {
		return quota.Policy{}, err
	}
	if err := quota.ValidateReason(reason); err != nil {
		return quota.Policy{}, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(patch, &members); err != nil || members == nil {
		return quota.Policy{}, &quota.ValidationError{Field: "body", Reason: "must be a JSON merge patch object (RFC 7396)"}
	}
	for _, ro := range []string{"resourceName", "createdAt", "updatedAt"} {
		if _, ok := members[ro]; ok {
			return quota.Policy{}, &quota.ValidationError{Field: ro, Reason: "is read-only"}
		}
	}
	cur, err := s.d.Ledger.GetPolicy(ctx, resource)
	if err != nil {
		return quota.Policy{}, err
	}
	qt := string(cur.QuotaType)
	doc, err := json.Marshal(patchable{
		QuotaType: &qt, TotalLimit: strconv.AppendInt(nil, cur.TotalLimit, 10),
		ResetCron: cur.ResetCron, Timezone: cur.Timezone,
		LeakThresholdSeconds: strconv.AppendInt(nil, cur.LeakThresholdSeconds, 10), FailMode: string(cur.FailMode.OrDefault()),
	})
	if err != nil {
		return quota.Policy{}, err
	}
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return quota.Policy{}, &quota.ValidationError{Field: "body", Reason: "is not a valid merge patch: " + err.Error()}
	}
	next, err := decodePatched(merged)
	if err != nil {
		return quota.Policy{}, err
	}
	next.ResourceName = resource
	if next.QuotaType != cur.QuotaType && !force {
		st, err := s.d.Quota.Status(ctx, resource)
		if err != nil {
			return quota.Policy{}, err
		}
		if st.Used+st.Reserved > 0 {
			return quota.Policy{}, fmt.Errorf("%w: the current period has %d %s used or reserved; changing quotaType "+
				"from %s to %s would count them as %s: send force=true to do it anyway, or wait for the next period",
				ErrInUse, st.Used+st.Reserved, cur.QuotaType.Unit(), cur.QuotaType, next.QuotaType, next.QuotaType.Unit())
		}
	}
	stored, _, err := s.d.Quota.PutPolicy(quota.WithReason(ctx, reason), next)
	return stored, err
}

// decodePatched reads the merged document strictly (strictjson: known
// members only, names matched exactly, whole-number amounts), worded like
// every other request body.
func decodePatched(b []byte) (quota.Policy, error) {
	var p patchable
	if err := strictjson.Unmarshal(b, &p); err != nil {
		return quota.Policy{}, err
	}
	// A member merged away (null in the patch) that has no default.
	required := func(field string) error {
		return &quota.ValidationError{Field: field, Reason: "is required (null removes it)"}
	}
	if p.QuotaType == nil {
		return quota.Policy{}, required("quotaType")
	}
	num := func(field string, n json.RawMessage, isRequired bool) (int64, error) {
		if isRequired && !strictjson.Given(n) {
			return 0, required(field)
		}
		v, err := strictjson.Amount(field, n, false)
		if err != nil || !strictjson.Given(n) {
			return 0, err
		}
		return v, quota.ValidateAmount(field, v, false) // a value given is at least 1; null takes the default
	}
	limit, err := num("totalLimit", p.TotalLimit, true)
	if err != nil {
		return quota.Policy{}, err
	}
	leak, err := num("leakThresholdSeconds", p.LeakThresholdSeconds, false)
	if err != nil {
		return quota.Policy{}, err
	}
	return quota.Policy{
		QuotaType: quota.QuotaType(*p.QuotaType), TotalLimit: limit, ResetCron: p.ResetCron,
		Timezone: p.Timezone, LeakThresholdSeconds: leak, FailMode: quota.FailMode(p.FailMode),
	}, nil
}

// periodJSON is a period as the audit log shows it.
type periodJSON struct {
	PeriodStart string  `json:"periodStart"`
	NextResetAt *string `json:"nextResetAt"`
}

func toPeriodJSON(p quota.Period) periodJSON {
	out := periodJSON{PeriodStart: p.Start.UTC().Format(quota.TimeFormat)}
	if !p.End.IsZero() {
		e := p.End.UTC().Format(quota.TimeFormat)
		out.NextResetAt = &e
	}
	return out
}

// Reset starts a new period of resource now: the period sequence is
// re-anchored at this instant (a cron policy's next reset stays its next
// fire time; an @every policy counts its intervals from now). The new
// period starts with nothing used; sessions in flight stay in their own
// period, where their finish settles and refunds. This instance uses the new
// period at once; others when the change is announced (internal/policysync),
// at the latest within QC_POLICY_CACHE_TTL. Audited as policy.reset
// with the periods before and after.
//
// Errors: *quota.ValidationError, quota.ErrResourceNotFound,
// quota.ErrUnavailable (when only the audit failed, the reset is done).
func (s *Service) Reset(ctx context.Context, resource, reason string) (old, cur quota.Period, err error) {
	if err := quota.ValidateResourceName(resource); err != nil {
		return old, cur, err
	}
	if err := quota.ValidateReason(reason); err != nil {
		return old, cur, err
	}
	pol, err := s.d.Ledger.GetPolicy(ctx, resource)
	if err != nil {
		return old, cur, err
	}
	now := s.now()
	if old, err = s.d.Sched.PeriodAt(pol, now); err != nil {
		return old, cur, err
	}
	np, err := s.d.Ledger.ResetPeriod(ctx, resource, now)
	if err != nil {
		return old, cur, err
	}
	s.d.Quota.ForgetPolicy(resource)
	if cur, err = s.d.Sched.PeriodAt(np, now); err != nil {
		return old, cur, err
	}
	return old, cur, s.audit(ctx, quota.ActionPolicyReset, resource, toPeriodJSON(old), toPeriodJSON(cur), reason)
}

// FinishRequest is a forced finish (POST /admin/sessions/{id}/finish).
type FinishRequest struct {
	SessionID string // the public id, as the client knows it
	// ClientID is the session's client ("" = any): session ids are scoped
	// to their client and resource, so an id two clients used names one
	// session per client, found with ClientID and ResourceName.
	ClientID     string
	ResourceName string // optional; when set it must be the session's
	Amount       *int64 // the usage to charge; nil = the grant
	Reason       string
}

// ForceFinish settles a USING (or LEAKED, within QC_FINISHED_RETENTION)
// session on its client's behalf, as a finish with Amount would (refund
// and overage included), and audits it as session.finish. It returns the
// finish and the session as it was.
//
// Errors: *quota.ValidationError, quota.ErrSessionNotFound (no such session,
// or not of ResourceName), quota.ErrSessionNotActive (already FINISHED, also
// when the client's own finish lands between the read and this finish),
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (s *Service) ForceFinish(ctx context.Context, req FinishRequest) (quota.FinishResponse, quota.UsageRecord, error) {
	var none quota.FinishResponse
	if err := quota.ValidateSessionID(req.SessionID); err != nil {
		return none, quota.UsageRecord{}, err
	}
	if req.ResourceName != "" {
		if err := quota.ValidateResourceName(req.ResourceName); err != nil {
			return none, quota.UsageRecord{}, err
		}
	}
	if req.Amount != nil {
		if err := quota.ValidateAmount("amount", *req.Amount, true); err != nil {
			return none, quota.UsageRecord{}, err
		}
	}
	if err := quota.ValidateReason(req.Reason); err != nil {
		return none, quota.UsageRecord{}, err
	}
	if req.ClientID != "" {
		if err := quota.ValidateClientID(req.ClientID); err != nil {
			return none, quota.UsageRecord{}, err
		}
	}
	row, err := s.clientSession(ctx, req.ResourceName, req.ClientID, req.SessionID)
	if err != nil {
		return none, row, err
	}
	if req.ResourceName != "" && row.ResourceName != req.ResourceName {
		return none, row, fmt.Errorf("session %s of resource %s: %w", req.SessionID, req.ResourceName, quota.ErrSessionNotFound)
	}
	if row.Status == quota.StatusFinished {
		return none, row, &quota.NotActiveError{SessionID: req.SessionID, Status: row.Status}
	}
	amount := row.GrantedAmount
	if req.Amount != nil {
		amount = *req.Amount
	}
	res, err := s.d.Quota.Finish(ctx, quota.FinishRequest{ResourceName: row.ResourceName, SessionID: req.SessionID,
		ClientID: row.ClientID, Actual: amount})
	if errors.Is(err, quota.ErrSessionConflict) {
		// The client's own finish (with another amount) came in after the
		// row was read: the session is finished, as if it had been found
		// so above.
		return none, row, &quota.NotActiveError{SessionID: req.SessionID, Status: quota.StatusFinished}
	}
	if err != nil {
		return none, row, err
	}
	row.SessionID = req.SessionID // the public id
	before := map[string]any{"sessionId": row.SessionID, "clientId": row.ClientID, "status": row.Status, "grantedAmount": row.GrantedAmount}
	after := map[string]any{"sessionId": row.SessionID, "clientId": row.ClientID, "status": quota.StatusFinished,
		"grantedAmount": res.Granted, "chargedAmount": res.Charged, "refundedAmount": res.Refunded, "overageAmount": res.Overage}
	return res, row, s.audit(ctx, quota.ActionSessionFinish, row.ResourceName, before, after, req.Reason)
}

// DeletePolicy removes the policy of resource, refused while it has live
// (USING) sessions. First the limit in Redis drops to 0, so no instance can
// grant meanwhile (an instance still holding the policy in its cache
// refuses applies as exhausted); then the live sessions are counted again
// and, if one slipped in, the limit is restored and the delete refused.
// The ledger rows stay. Audited as policy.delete with the policy before.
//
// Errors: *quota.ValidationError, quota.ErrResourceNotFound, ErrInUse (409),
// quota.ErrUnavailable.
func (s *Service) DeletePolicy(ctx context.Context, resource, reason string) (quota.Policy, error) {
	if err := quota.ValidateResourceName(resource); err != nil {
		return quota.Policy{}, err
	}
	if err := quota.ValidateReason(reason); err != nil {
		return quota.Policy{}, err
	}
	pol, err := s.d.Ledger.GetPolicy(ctx, resource)
	if err != nil {
		return quota.Policy{}, err
	}
	inUse := func() error {
		n, err := s.d.Live.LiveCount(ctx, resource)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %s has %d live sessions; finish them (or let them be swept) first", ErrInUse, resource, n)
		}
		return nil
	}
	if err := inUse(); err != nil {
		return quota.Policy{}, err
	}
	if err := s.d.Live.SetLimit(ctx, resource, 0); err != nil {
		return quota.Policy{}, err
	}
	if err := inUse(); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if rerr := s.d.Live.SetLimit(rctx, resource, pol.TotalLimit); rerr != nil {
			return quota.Policy{}, errors.Join(err, fmt.Errorf("restore limit %d: %w", pol.TotalLimit, rerr))
		}
		return quota.Policy{}, err
	}
	if err := s.d.Ledger.DeletePolicy(ctx, resource); err != nil {
		return quota.Policy{}, err
	}
	s.d.Quota.ForgetPolicy(resource)
	return pol, s.audit(ctx, quota.ActionPolicyDelete, resource, pol.View(), nil, reason)
}

// audit records an action that is done; a failure is ErrUnavailable (the
// action stays done: the caller may retry the audit by repeating it where
// that is harmless, and the log says so).
func (s *Service) audit(ctx context.Context, action, resource string, before, after any, reason string) error {
	if s.d.Audit == nil {
		return nil
	}
	raw := func(v any) (json.RawMessage, error) {
		if v == nil {
			return nil, nil
		}
		return json.Marshal(v)
	}
	b, err := raw(before)
	if err != nil {
		return err
	}
	a, err := raw(after)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = s.d.Audit.RecordAudit(actx, quota.AuditEntry{
		At: s.now(), Actor: quota.ActorFrom(ctx), Action: action, Resource: resource, Before: b, After: a, Reason: reason,
	})
	if err != nil && !errors.Is(err, quota.ErrUnavailable) {
		err = fmt.Errorf("audit %s: %w: %w", action, quota.ErrUnavailable, err)
	}
	return err
}

// clientSession reads the ledger row of a session by its public id: the
// bare id's row when it is client's ("" = any) on resource ("" = any), else
// the scoped id's of resource and client (quota.ScopedSessionID; it takes
// a resource). Errors: quota.ErrSessionNotFound.
func (s *Service) clientSession(ctx context.Context, resource, client, id string) (quota.UsageRecord, error) {
	row, err := s.d.Ledger.Session(ctx, id)
	if err == nil && (client == "" || row.ClientID == client) && (resource == "" || row.ResourceName == resource) {
		return row, nil
	}
	if (err != nil && !errors.Is(err, quota.ErrSessionNotFound)) || resource == "" {
		if err == nil {
			err = fmt.Errorf("session %s of client %s: %w", id, client, quota.ErrSessionNotFound)
		}
		return quota.UsageRecord{}, err
	}
	return s.d.Ledger.Session(ctx, quota.ScopedSessionID(resource, client, id))
}
