package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// AuditQuery filters GET /admin/audit. Zero fields are left out of the query.
type AuditQuery struct {
	// Resource keeps only entries about this resource; "" = all.
	Resource string
	// Actor keeps only the changes of this admin token's name; "" = all.
	Actor string
	// Action keeps only this action (e.g. "policy.put", "reclaim.confirm");
	// "" = all.
	Action string
	// Limit is the most entries returned, 1 … 500; 0 lets the server use
	// its default (100).
	Limit int
	// Before keeps only entries with an id below it (the id of the last
	// entry of the previous page); 0 = from the newest.
	Before int64
}

// AuditEntry is one admin change as the audit log records it, newest first.
type AuditEntry struct {
	// ID orders the entries; pass the last one as AuditQuery.Before for the
	// next page.
	ID int64 `json:"id"`
	// At is when the change was made (UTC, milliseconds).
	At time.Time `json:"at"`
	// Actor is the admin token's name ("anonymous" in open dev mode).
	Actor string `json:"actor"`
	// Action is what was done, e.g. "policy.put".
	Action string `json:"action"`
	// Resource is the resource changed.
	Resource string `json:"resource"`
	// Before and After are the policy's JSON before and after the change
	// (null when there was none).
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	// Reason is why, as the operator gave it ("" when none was given).
	Reason string `json:"reason"`
}

// Audit reads the audit log of admin changes, newest first
// (GET /admin/audit). Errors: ErrInvalidArgument for a Limit outside
// 1 … 500, a negative Before, a bad resource name, actor or action.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if q.Limit < 0 || q.Before < 0 {
		return nil, errors.New("client: Audit: negative Limit or Before")
	}
	v := url.Values{}
	if q.Resource != "" {
		v.Set("resource", q.Resource)
	}
	setIf(v, "actor", q.Actor)
	setIf(v, "action", q.Action)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Before > 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	var out struct {
		Entries []AuditEntry `json:"entries"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/admin/audit", v, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Entries == nil {
		out.Entries = []AuditEntry{}
	}
	return out.Entries, nil
}

// ReconcileReport is what one reconciliation of one resource found and did.
// Amounts are in the policy's unit.
type ReconcileReport struct {
	Resource    string    `json:"resource"`
	PeriodStart time.Time `json:"periodStart"`
	// Redis' and the ledger's charged and reserved totals of the period,
	// and Redis minus ledger.
	RedisCharged   int64 `json:"redisCharged"`
	RedisReserved  int64 `json:"redisReserved"`
	LedgerCharged  int64 `json:"ledgerCharged"`
	LedgerReserved int64 `json:"ledgerReserved"`
	DriftCharged   int64 `json:"driftCharged"`
	DriftReserved  int64 `json:"driftReserved"`
	// Repairs made: reservations without a ledger row given back, ledger
	// rows settled from Redis, sessions restored into Redis, the balance
	// corrected, the limit set to the policy's, fail-open grants recorded.
	OrphansReleased   int  `json:"orphansReleased"`
	LedgerRowsSettled int  `json:"ledgerRowsSettled"`
	SessionsRestored  int  `json:"sessionsRestored"`
	BalanceAdjusted   bool `json:"balanceAdjusted"`
	LimitSynced       bool `json:"limitSynced"`
	FailOpenRecorded  int  `json:"failOpenRecorded"`
	// EarlierPeriodAdjusted: the previous period's balance (still in
	// Redis) had a stable drift and was corrected.
	EarlierPeriodAdjusted bool `json:"earlierPeriodAdjusted,omitempty"`
	// AdjustRefused says why a stable drift was not corrected ("" when it
	// was, or there was none): "held", the drift was only reservations
	// live sessions without a USING ledger row hold (their own give-backs
	// return them); "moved", the balance or the ledger changed after it
	// was measured. A later pass corrects what is left.
	AdjustRefused string `json:"adjustRefused,omitempty"`
	// Skipped says why nothing was done (e.g. another instance holds the
	// resource's lock); "" when it ran.
	Skipped string `json:"skipped,omitempty"`
}

// Reconcile runs reconciliation now (POST /admin/reconcile): of resource
// only, or of every resource when resource is "". Drift it could not repair
// is in the reports, not an error. Errors: ErrReconcileSkipped (another
// pass held a resource's lock, so nothing was done for it: retry after
// Error.RetryAfter), ErrResourceNotFound, ErrInvalidArgument,
// ErrBackendUnavailable.
func (c *Client) Reconcile(ctx context.Context, resource string) ([]ReconcileReport, error) {
	var q url.Values
	if resource != "" {
		q = url.Values{"resourceName": {resource}}
	}
	var out struct {
		Reports []ReconcileReport `json:"reports"`
	}
	if _, err := c.do(ctx, http.MethodPost, "/admin/reconcile", q, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Reports == nil {
		out.Reports = []ReconcileReport{}
	}
	return out.Reports, nil
}
