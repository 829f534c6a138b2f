package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// This file holds the operators' calls (issue 10): the session map, usage
// history, merge-patching, resetting and deleting a policy, and forcing a
// session's finish. All need an admin token (WithAdminToken) when the
// server has admin tokens configured.

// Codes of the operators' endpoints.
const (
	CodePolicyInUse    = "POLICY_IN_USE"   // 409: quotaType change with usage, or delete with live sessions
	CodeNotImplemented = "NOT_IMPLEMENTED" // 501: a server built without the operators' endpoints
)

// ErrPolicyInUse: the change would reinterpret or orphan what is in use
// (409); nothing was changed.
var ErrPolicyInUse = &Error{Code: CodePolicyInUse, Message: "policy in use"}

// ErrNotImplemented: the server was built without the operators'
// endpoints (501).
var ErrNotImplemented = &Error{Code: CodeNotImplemented, Message: "not implemented"}

// SessionQuery filters GET /admin/sessions. ResourceName is required.
type SessionQuery struct {
	ResourceName string
	ClientID     string // "" = any
	BusinessLine string // "" = any
	Status       string // USING, FINISHED, LEAKED; "" = USING first, then the others
	Limit        int    // 1 … 1000; 0 = the server's default (100)
	Cursor       string // NextCursor of the previous page; "" = the first page
}

// SessionInfo is one session of the session map. Amounts are in the
// policy's unit; times are UTC.
type SessionInfo struct {
	SessionID      string     `json:"sessionId"`
	ResourceName   string     `json:"resourceName"`
	ClientID       string     `json:"clientId"`
	BusinessLine   string     `json:"businessLine,omitempty"` // "" when it has none
	Status         string     `json:"status"`
	GrantedAmount  int64      `json:"grantedAmount"`
	ChargedAmount  int64      `json:"chargedAmount"`
	RefundedAmount int64      `json:"refundedAmount"`
	OverageAmount  int64      `json:"overageAmount"`
	PeriodStart    time.Time  `json:"periodStart"`
	StartTime      time.Time  `json:"startTime"`
	LastHeartbeat  *time.Time `json:"lastHeartbeatAt"` // USING only: lease expiry − leak threshold
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt"`  // USING only
	EndTime        *time.Time `json:"endTime"`         // FINISHED and LEAKED only
	AgeSeconds     float64    `json:"ageSeconds"`      // start to now (USING) or to the end
	FailOpen       bool       `json:"failOpen"`
	LeakRecovered  bool       `json:"leakRecovered"`
}

// SessionPage is one page of sessions; NextCursor is "" on the last page.
type SessionPage struct {
	Sessions   []SessionInfo `json:"sessions"`
	NextCursor string        `json:"-"`
}

// Sessions lists the sessions of q.ResourceName, newest first: USING ones
// (from Redis, the latest lease first), then FINISHED and LEAKED ones (from
// the ledger). A page may hold fewer than Limit sessions and still have a
// NextCursor. Errors: ErrInvalidArgument (a bad filter or a cursor of
// another query), ErrResourceNotFound.
func (c *Client) Sessions(ctx context.Context, q SessionQuery) (*SessionPage, error) {
	v := url.Values{"resourceName": {q.ResourceName}}
	setIf(v, "clientId", q.ClientID)
	setIf(v, "businessLine", q.BusinessLine)
	setIf(v, "status", q.Status)
	setIf(v, "cursor", q.Cursor)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out struct {
		Sessions   []SessionInfo `json:"sessions"`
		NextCursor *string       `json:"nextCursor"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/admin/sessions", v, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	page := &SessionPage{Sessions: out.Sessions}
	if page.Sessions == nil {
		page.Sessions = []SessionInfo{}
	}
	if out.NextCursor != nil {
		page.NextCursor = *out.NextCursor
	}
	return page, nil
}

func setIf(v url.Values, k, val string) {
	if val != "" {
		v.Set(k, val)
	}
}

// UsageQuery asks GET /admin/usage: sessions of ResourceName started in
// [From, To), grouped by GroupBy ("client", "line", "hour" or "day"; UTC). Zero
// From, To and GroupBy take the server's defaults (the last 24 h, by hour).
type UsageQuery struct {
	ResourceName string
	From, To     time.Time
	GroupBy      string
}

// UsageGroup is one group's sums, in the policy's unit. ClientID is set for
// groupBy=client, BusinessLine for groupBy=line ("" for the sessions of no
// line), Start (the bucket's UTC start) otherwise.
type UsageGroup struct {
	ClientID       string     `json:"clientId,omitempty"`
	BusinessLine   string     `json:"businessLine,omitempty"`
	Start          *time.Time `json:"start,omitempty"`
	Sessions       int64      `json:"sessions"`
	OpenSessions   int64      `json:"openSessions"`
	LeakedSessions int64      `json:"leakedSessions"`
	GrantedAmount  int64      `json:"grantedAmount"`
	ChargedAmount  int64      `json:"chargedAmount"`
	ReservedAmount int64      `json:"reservedAmount"`
	RefundedAmount int64      `json:"refundedAmount"`
	OverageAmount  int64      `json:"overageAmount"`
}

// UsageReport is the answer of Usage.
type UsageReport struct {
	ResourceName string       `json:"resourceName"`
	QuotaType    QuotaType    `json:"quotaType"`
	Unit         string       `json:"unit"`
	From         time.Time    `json:"from"`
	To           time.Time    `json:"to"`
	GroupBy      string       `json:"groupBy"`
	Groups       []UsageGroup `json:"groups"`
	Truncated    bool         `json:"truncated"`
}

// Usage sums the ledger per client, business line, hour or day. Errors:
// ErrInvalidArgument (from not before to, an unknown groupBy, a span too
// long for the grouping), ErrResourceNotFound.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (*UsageReport, error) {
	v := url.Values{"resourceName": {q.ResourceName}}
	setIf(v, "groupBy", q.GroupBy)
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	var out UsageReport
	if _, err := c.do(ctx, http.MethodGet, "/admin/usage", v, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Groups == nil {
		out.Groups = []UsageGroup{}
	}
	return &out, nil
}

// PatchOptions go with a PatchPolicy.
type PatchOptions struct {
	// Force changes quotaType even while the current period has usage
	// (which is then counted in the new unit).
	Force bool
	// Reason is recorded in the audit log.
	Reason string
}

// PatchPolicy applies a JSON merge patch (RFC 7396) to the policy of
// resource (PATCH /admin/policies/{resourceName}): patch is a JSON object
// (a map, a struct, or json.RawMessage) holding only the members to change;
// a member set to null takes the PUT default. Errors: ErrInvalidArgument (a
// patch that makes the policy invalid; nothing changed),
// ErrResourceNotFound, and a *Error with Code "POLICY_IN_USE" (409) when
// quotaType would change while the period has usage and Force is false.
func (c *Client) PatchPolicy(ctx context.Context, resource string, patch any, o PatchOptions) (*Policy, error) {
	if resource == "" {
		return nil, errors.New("client: PatchPolicy: empty resource name")
	}
	v := url.Values{}
	if o.Force {
		v.Set("force", "true")
	}
	setIf(v, "reason", o.Reason)
	var out Policy
	if _, err := c.do(ctx, http.MethodPatch, "/admin/policies/"+url.PathEscape(resource), v, patch, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PeriodReset says which period a reset ended and which it started.
type PeriodReset struct {
	ResourceName   string `json:"resourceName"`
	PreviousPeriod struct {
		PeriodStart time.Time  `json:"periodStart"`
		NextResetAt *time.Time `json:"nextResetAt"`
	} `json:"previousPeriod"`
	PeriodStart time.Time  `json:"periodStart"`
	NextResetAt *time.Time `json:"nextResetAt"`
}

// ResetPeriod starts a new period of resource now
// (POST /admin/policies/{resourceName}/reset); sessions in flight settle
// into their own period. reason is recorded in the audit log. Errors:
// ErrResourceNotFound.
func (c *Client) ResetPeriod(ctx context.Context, resource, reason string) (*PeriodReset, error) {
	if resource == "" {
		return nil, errors.New("client: ResetPeriod: empty resource name")
	}
	var out PeriodReset
	body := map[string]string{"reason": reason}
	if _, err := c.do(ctx, http.MethodPost, "/admin/policies/"+url.PathEscape(resource)+"/reset", nil, body, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ForceFinishRequest settles a session on its client's behalf.
type ForceFinishRequest struct {
	ResourceName string `json:"resourceName,omitempty"` // optional check: the session's resource
	// ClientID is the session's client: session ids are scoped to the
	// client that applied; empty finds a session applied without one (or
	// before ids were scoped).
	ClientID string `json:"clientId,omitempty"`
	Amount   *int64 `json:"amount,omitempty"` // usage to charge; nil = the grant
	Reason   string `json:"reason,omitempty"`
}

// ForceFinishResult is what a forced finish settled.
type ForceFinishResult struct {
	SessionID      string    `json:"sessionId"`
	ResourceName   string    `json:"resourceName"`
	QuotaType      QuotaType `json:"quotaType"` // the unit of the amounts
	ClientID       string    `json:"clientId"`
	GrantedAmount  int64     `json:"grantedAmount"`
	ChargedAmount  int64     `json:"chargedAmount"`
	RefundedAmount int64     `json:"refundedAmount"`
	OverageAmount  int64     `json:"overageAmount"`
	RemainingQuota int64     `json:"remainingQuota"`
}

// ForceFinish settles session sessionID (POST /admin/sessions/{id}/finish).
// Errors: ErrSessionNotFound, ErrSessionNotActive (already FINISHED),
// ErrInvalidArgument.
func (c *Client) ForceFinish(ctx context.Context, sessionID string, req ForceFinishRequest) (*ForceFinishResult, error) {
	if sessionID == "" {
		return nil, errors.New("client: ForceFinish: empty session id")
	}
	var out ForceFinishResult
	if _, err := c.do(ctx, http.MethodPost, "/admin/sessions/"+url.PathEscape(sessionID)+"/finish", nil, req, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePolicy removes the policy of resource (DELETE
// /admin/policies/{resourceName}) and returns it as it was. Errors:
// ErrResourceNotFound, and a *Error with Code "POLICY_IN_USE" (409) while
// the resource has live sessions.
func (c *Client) DeletePolicy(ctx context.Context, resource, reason string) (*Policy, error) {
	if resource == "" {
		return nil, errors.New("client: DeletePolicy: empty resource name")
	}
	v := url.Values{}
	setIf(v, "reason", reason)
	var out struct {
		Deleted Policy `json:"deleted"`
	}
	if _, err := c.do(ctx, http.MethodDelete, "/admin/policies/"+url.PathEscape(resource), v, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out.Deleted, nil
}

// GrantRequest adds temporary quota (GrantQuota) or releases reserve from
// the buffer pool (ReleaseReserve). Amounts are in the policy's unit.
type GrantRequest struct {
	Amount       int64      `json:"amount"`
	BusinessLine string     `json:"businessLine,omitempty"` // "" = every line (grant) or the shared pool (release)
	EffectiveAt  *time.Time `json:"effectiveAt,omitempty"`  // nil = now; grants only (a release refuses it)
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`    // required for a grant
	Reason       string     `json:"reason,omitempty"`
}

// GrantRecord is a grant or release as the server recorded it.
type GrantRecord struct {
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	BusinessLine string `json:"businessLine,omitempty"`
	Amount       int64  `json:"amount"`
	Used         int64  `json:"used"`
	EffectiveAt  string `json:"effectiveAt"`
	ExpiresAt    string `json:"expiresAt,omitempty"`
	Reason       string `json:"reason"`
	CreatedAt    string `json:"createdAt"`
	Active       bool   `json:"active"`
}

// GrantQuota adds a temporary grant to resource
// (POST /admin/policies/{resourceName}/grants). Errors: ErrInvalidArgument,
// ErrResourceNotFound.
func (c *Client) GrantQuota(ctx context.Context, resource string, req GrantRequest) (*GrantRecord, error) {
	return c.grant(ctx, resource, "/grants", "grant", req)
}

// ReleaseReserve moves reserve from the buffer pool into use
// (POST /admin/policies/{resourceName}/buffer/release). Errors:
// ErrInvalidArgument (no buffer, or not that much in it), ErrResourceNotFound.
func (c *Client) ReleaseReserve(ctx context.Context, resource string, req GrantRequest) (*GrantRecord, error) {
	return c.grant(ctx, resource, "/buffer/release", "release", req)
}

func (c *Client) grant(ctx context.Context, resource, path, key string, req GrantRequest) (*GrantRecord, error) {
	if resource == "" {
		return nil, errors.New("client: empty resource name")
	}
	var out map[string]json.RawMessage
	if _, err := c.do(ctx, http.MethodPost, "/admin/policies/"+url.PathEscape(resource)+path, nil, req, authAdmin, &out); err != nil {
		return nil, err
	}
	var g GrantRecord
	if err := json.Unmarshal(out[key], &g); err != nil {
		return nil, fmt.Errorf("client: POST %s: decoding %q: %w", path, key, err)
	}
	return &g, nil
}
