package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
)

// This file holds the pools' admin calls (business lines, seed 003): the
// layout and its lines, temporary grants, reclaims and the pool event
// stream, under /admin/policies/{resourceName}/…. All need an admin token
// (WithAdminToken) when the server has admin tokens configured. Amounts
// are in the policy's unit.

// PoolsConfig is a resource's pool layout: its settings, the three pools'
// sizes for the current limit, and every business line (GET …/lines).
type PoolsConfig struct {
	ResourceName string       `json:"resourceName"`
	Pools        PoolSettings `json:"pools"`
	// Shared, Dedicated and Buffer are the pools' sizes: the limit cut by
	// the settings' percentages.
	Shared    int64        `json:"shared"`
	Dedicated int64        `json:"dedicated"`
	Buffer    int64        `json:"buffer"`
	Lines     []LineLayout `json:"lines"`
}

// LineLayout is one business line in the layout.
type LineLayout struct {
	BusinessLine string `json:"businessLine"`
	// Tier is CORE, GROWTH or EXPLORE.
	Tier string `json:"tier"`
	// Weight is its share of the dedicated pool; 0 when it was given an
	// explicit Dedicated amount.
	Weight int64 `json:"weight,omitempty"`
	// Dedicated is its dedicated part in the layout (by weight or explicit).
	Dedicated int64 `json:"dedicated"`
	// BorrowLimit is the most it may hold of the shared pool.
	BorrowLimit int64 `json:"borrowLimit"`
}

// LineSpec creates or replaces a business line (PutLine): a Tier (CORE,
// GROWTH or EXPLORE) and either a Weight (1 … 1000) or a Dedicated amount;
// neither = weight 1.
type LineSpec struct {
	Tier      string `json:"tier"`
	Weight    int64  `json:"weight,omitempty"`
	Dedicated int64  `json:"dedicated,omitempty"`
}

// Reclaim is one move of dedicated quota from an idle line to a pressed
// one: WARNED → CONFIRMED → EXECUTED (or CANCELLED, RETURNED). Times are
// Unix milliseconds.
type Reclaim struct {
	ID       string `json:"id"`
	FromLine string `json:"fromLine"`
	ToLine   string `json:"toLine"`
	// Amount is proposed; once EXECUTED, what moved.
	Amount      int64  `json:"amount"`
	State       string `json:"state"`
	DryRun      bool   `json:"dryRun"`
	WarnedAtMs  int64  `json:"warnedAtMs"`
	UpdatedAtMs int64  `json:"updatedAtMs"`
	Reason      string `json:"reason"`
}

// PoolEvent is one decision of the pool controller or of an operator, with
// its reason (Kind: WATERMARK_RAISED, LEND_REACTIVE, RECLAIM_WARNED, …).
type PoolEvent struct {
	ID           int64  `json:"id"`
	ResourceName string `json:"resourceName"`
	AtMs         int64  `json:"atMs"`
	Kind         string `json:"kind"`
	BusinessLine string `json:"businessLine,omitempty"`
	ToLine       string `json:"toLine,omitempty"`
	// Amount is the buffer lent or returned, the quota reclaimed, or a new
	// watermark in basis points, by Kind.
	Amount int64  `json:"amount,omitempty"`
	Reason string `json:"reason"`
	Mode   string `json:"mode,omitempty"`
}

func poolPath(resource, tail string) (string, error) {
	if resource == "" {
		return "", errors.New("client: empty resource name")
	}
	return "/admin/policies/" + url.PathEscape(resource) + tail, nil
}

// Pools reads a resource's layout (GET …/lines). Errors:
// ErrResourceNotFound, ErrNotImplemented (a server without pools).
func (c *Client) Pools(ctx context.Context, resource string) (*PoolsConfig, error) {
	return c.poolsCall(ctx, http.MethodGet, resource, "/lines", nil)
}

// PutLine creates or replaces business line line and answers the whole
// layout. Errors: ErrInvalidArgument (a bad tier, weight or amount, or a
// layout that does not fit the limit), ErrResourceNotFound.
func (c *Client) PutLine(ctx context.Context, resource, line string, spec LineSpec) (*PoolsConfig, error) {
	if line == "" {
		return nil, errors.New("client: empty line name")
	}
	return c.poolsCall(ctx, http.MethodPut, resource, "/lines/"+url.PathEscape(line), spec)
}

// DeleteLine removes business line line and answers the layout. Errors:
// ErrConflict while it has open sessions, ErrResourceNotFound.
func (c *Client) DeleteLine(ctx context.Context, resource, line string) (*PoolsConfig, error) {
	if line == "" {
		return nil, errors.New("client: empty line name")
	}
	return c.poolsCall(ctx, http.MethodDelete, resource, "/lines/"+url.PathEscape(line), nil)
}

// PutPoolSettings replaces the pool settings (PUT …/pools; every field is
// sent: start from DefaultPoolSettings). Errors: ErrInvalidArgument (the
// shares do not sum to 100, a value out of range), ErrResourceNotFound.
func (c *Client) PutPoolSettings(ctx context.Context, resource string, s PoolSettings) (*PoolsConfig, error) {
	return c.poolsCall(ctx, http.MethodPut, resource, "/pools", s)
}

func (c *Client) poolsCall(ctx context.Context, method, resource, tail string, in any) (*PoolsConfig, error) {
	p, err := poolPath(resource, tail)
	if err != nil {
		return nil, err
	}
	var out PoolsConfig
	if _, err := c.do(ctx, method, p, nil, in, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Lines == nil {
		out.Lines = []LineLayout{}
	}
	return &out, nil
}

// Grants lists the temporary grants and buffer releases not yet expired
// (GET …/grants). Errors: ErrResourceNotFound.
func (c *Client) Grants(ctx context.Context, resource string) ([]PoolGrant, error) {
	p, err := poolPath(resource, "/grants")
	if err != nil {
		return nil, err
	}
	var out struct {
		Grants []PoolGrant `json:"grants"`
	}
	if _, err := c.do(ctx, http.MethodGet, p, nil, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Grants == nil {
		out.Grants = []PoolGrant{}
	}
	return out.Grants, nil
}

// VoidGrant ends grant (or release) id now; what sessions hold of it stays
// charged (DELETE …/grants/{id}). It is VoidGrantWithReason without a
// reason. Errors: ErrResourceNotFound (no such resource or grant).
func (c *Client) VoidGrant(ctx context.Context, resource, id string) error {
	return c.VoidGrantWithReason(ctx, resource, id, "")
}

// VoidGrantWithReason is VoidGrant with the operator's reason, recorded as
// the grant.void audit entry's reason ("" = none; at most 500 characters,
// no control characters). Errors: ErrResourceNotFound (no such resource
// or grant), ErrInvalidArgument (the reason).
func (c *Client) VoidGrantWithReason(ctx context.Context, resource, id, reason string) error {
	_, err := c.VoidGrantReturning(ctx, resource, id, reason)
	return err
}

// VoidGrantReturning is VoidGrantWithReason that also answers what was
// voided and, for a buffer release, the buffer it gave back (at most what
// its line still held of it: PoolGrant.Held). Errors: as
// VoidGrantWithReason.
func (c *Client) VoidGrantReturning(ctx context.Context, resource, id, reason string) (*VoidedGrant, error) {
	if id == "" {
		return nil, errors.New("client: empty grant id")
	}
	p, err := poolPath(resource, "/grants/"+url.PathEscape(id))
	if err != nil {
		return nil, err
	}
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	var out VoidedGrant
	if _, err = c.do(ctx, http.MethodDelete, p, q, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reclaims lists a resource's reclaims, newest first (GET …/reclaims).
// Errors: ErrResourceNotFound.
func (c *Client) Reclaims(ctx context.Context, resource string) ([]Reclaim, error) {
	p, err := poolPath(resource, "/reclaims")
	if err != nil {
		return nil, err
	}
	var out struct {
		Reclaims []Reclaim `json:"reclaims"`
	}
	if _, err := c.do(ctx, http.MethodGet, p, nil, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Reclaims == nil {
		out.Reclaims = []Reclaim{}
	}
	return out.Reclaims, nil
}

// ConfirmReclaim confirms a WARNED reclaim (the controller executes it at
// its next tick) or, with confirm false, cancels a WARNED or CONFIRMED
// one; reason goes to the audit log. Errors: ErrConflict (another state),
// ErrResourceNotFound (no such resource or reclaim), ErrInvalidArgument.
func (c *Client) ConfirmReclaim(ctx context.Context, resource, id string, confirm bool, reason string) (*Reclaim, error) {
	if id == "" {
		return nil, errors.New("client: empty reclaim id")
	}
	step := "/cancel"
	if confirm {
		step = "/confirm"
	}
	p, err := poolPath(resource, "/reclaims/"+url.PathEscape(id)+step)
	if err != nil {
		return nil, err
	}
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	var out struct {
		Reclaim Reclaim `json:"reclaim"`
	}
	if _, err := c.do(ctx, http.MethodPost, p, q, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out.Reclaim, nil
}

// PoolEvents reads the pool event stream, newest first: at most limit
// events (1 … 500; 0 = the server's default, 100). Errors:
// ErrInvalidArgument, ErrResourceNotFound.
func (c *Client) PoolEvents(ctx context.Context, resource string, limit int) ([]PoolEvent, error) {
	if limit < 0 {
		return nil, errors.New("client: PoolEvents: negative limit")
	}
	p, err := poolPath(resource, "/pool-events")
	if err != nil {
		return nil, err
	}
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out struct {
		Events []PoolEvent `json:"events"`
	}
	if _, err := c.do(ctx, http.MethodGet, p, q, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Events == nil {
		out.Events = []PoolEvent{}
	}
	return out.Events, nil
}
