package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Audit actions: what an AuditEntry records.
const (
	// ActionPolicyPut is a policy created or replaced by PUT
	// /admin/policies/{resourceName}.
	ActionPolicyPut = "policy.put"
)

// AnonymousActor is the actor recorded for changes made without an admin
// token (dev mode without QC_ADMIN_TOKENS).
const AnonymousActor = "anonymous"

// auditTimeout bounds the write of one audit entry once the change it
// records is stored.
const auditTimeout = 5 * time.Second

// Bounds of AuditFilter.Limit.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 500
)

// AuditEntry is one admin change: who (Actor, the admin token's name), what
// (Action on Resource), when (At, UTC at millisecond precision) and the
// state before and after as JSON. Before is nil (JSON null) when the change
// created the object.
type AuditEntry struct {
	At       time.Time
	Actor    string // 1 to 64 characters
	Action   string // e.g. ActionPolicyPut
	Resource string // the resource name the change was about
	Before   json.RawMessage
	After    json.RawMessage
	// Reason is the operator's why, up to MaxReasonLength characters ("" when
	// none was given); see WithReason.
	Reason string
}

// AuditRecord is a stored AuditEntry with its ID, which grows with every
// entry written.
type AuditRecord struct {
	ID int64
	AuditEntry
}

// AuditFilter selects audit records, newest first. Zero values select
// everything: Resource "" any resource, BeforeID 0 from the newest, Limit 0
// DefaultAuditLimit.
type AuditFilter struct {
	Resource string
	// Actor keeps only the changes of this admin token's name ("" = any).
	Actor string
	// Action keeps only this action, e.g. "policy.put" or "reclaim.confirm"
	// ("" = any).
	Action   string
	Limit    int   // 1 … MaxAuditLimit
	BeforeID int64 // only records with ID < BeforeID (the next page)
}

// AuditLog is the durable record of admin changes (MySQL).
type AuditLog interface {
	// RecordAudit appends one entry.
	RecordAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns the entries matching f, newest (highest ID) first.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error)
}

type actorKey struct{}

// WithActor returns ctx carrying the name of who makes the change (the
// admin token's name); the Service records it in the audit log.
func WithActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

// ActorFrom returns the actor set by WithActor, or AnonymousActor.
func ActorFrom(ctx context.Context) string {
	if name, ok := ctx.Value(actorKey{}).(string); ok && name != "" {
		return name
	}
	return AnonymousActor
}

// validActor: an admin token's name as the audit log records it.
func validActor(s string) bool {
	if len(s) > 128 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// validAction: an audit action such as "policy.put".
func validAction(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

// Validate checks f's bounds, the one check of an audit filter: Resource
// "" or a valid resource name, Actor "" or 1 … 128 characters without
// control characters, Action "" or 1 … 64 of [a-z0-9_.], Limit 0 (the default) or 1 … MaxAuditLimit,
// BeforeID 0 (from the newest) or an entry id ≥ 1. Errors: a
// *ValidationError for field "resource", "actor", "action", "limit" or
// "before".
func (f AuditFilter) Validate() error {
	if f.Resource != "" && ValidateResourceName(f.Resource) != nil {
		return invalid("resource", "must be 1 to 64 characters of [a-z0-9_.-]")
	}
	if f.Actor != "" && !validActor(f.Actor) {
		return invalid("actor", "must be 1 to 128 characters without control characters")
	}
	if f.Action != "" && !validAction(f.Action) {
		return invalid("action", "must be 1 to 64 characters of [a-z0-9_.], e.g. policy.put")
	}
	if f.Limit < 0 || f.Limit > MaxAuditLimit {
		return invalid("limit", "must be a whole number from 1 to "+strconv.Itoa(MaxAuditLimit))
	}
	if f.BeforeID < 0 {
		return invalid("before", "must be an audit entry id (a whole number, at least 1)")
	}
	return nil
}

// Audit lists the audit log, newest first. Without an audit log configured
// (Options.Audit) nothing was recorded and the list is empty.
//
// Errors: *ValidationError (a bad filter), ErrUnavailable.
func (s *Service) Audit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if f.Limit == 0 {
		f.Limit = DefaultAuditLimit
	}
	if s.opt.Audit == nil {
		return []AuditRecord{}, nil
	}
	recs, err := s.opt.Audit.ListAudit(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return recs, nil
}

// policyAudit reads the policy of resource before a change, when an audit
// log is configured, and returns the function that records the change once
// the new policy is stored. A failure to record is ErrUnavailable: the
// change is stored, and a retry of the same PUT records it (see
// auditedSettings). A PUT that changed nothing (unchanged) records nothing
// when its settings are already in the log. The read and the write are
// separate steps, so of concurrent PUTs of one resource one may record a
// before that another PUT had already replaced.
func (s *Service) policyAudit(ctx context.Context, resource string, at time.Time) (func(after Policy, created, unchanged bool) error, error) {
	if s.opt.Audit == nil {
		return func(Policy, bool, bool) error { return nil }, nil
	}
	var before json.RawMessage
	old, err := s.policies.read(ctx, resource)
	switch {
	case err == nil:
		if before, err = policyJSON(old); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
	case !errors.Is(err, ErrResourceNotFound):
		return nil, fmt.Errorf("audit: read policy before the change: %w", err)
	}
	return func(after Policy, created, unchanged bool) error {
		if created {
			before = nil // this call's insert created it: nothing was there
		}
		a, err := policyJSON(after)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		// The change is stored: record it even if the caller has gone away
		// meanwhile, within a deadline of its own.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
		defer cancel()
		if unchanged {
			done, err := s.auditedSettings(actx, after)
			if err != nil {
				return auditUnavailable(err)
			}
			if done {
				return nil
			}
		}
		return auditUnavailable(s.opt.Audit.RecordAudit(actx, AuditEntry{
			At: at, Actor: ActorFrom(ctx), Action: ActionPolicyPut, Resource: resource,
			Before: before, After: a, Reason: ReasonFrom(ctx),
		}))
	}, nil
}

// auditUnavailable is err (nil stays nil) as an audit failure: one wrapping
// ErrUnavailable.
func auditUnavailable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnavailable):
		return fmt.Errorf("audit: %w", err)
	}
	return fmt.Errorf("audit: %w: %w", ErrUnavailable, err)
}

// auditScanLimit bounds how many of a resource's newest audit entries
// auditedSettings reads (pages of MaxAuditLimit).
const auditScanLimit = 4 * MaxAuditLimit

// auditedSettings reports whether the audit log already shows pol's
// settings as the resource's: its newest policy.put entry (not followed by
// a policy.delete) has them as after. A PUT that changes nothing then needs
// no entry; when it does not (the PUT that stored them failed to record
// it, the case of a retry after ErrUnavailable; a policy stored without an
// audit log; an entry older than the newest auditScanLimit), the PUT
// records one. Errors: the audit log's.
func (s *Service) auditedSettings(ctx context.Context, pol Policy) (bool, error) {
	want := pol.View()
	want.CreatedAt, want.UpdatedAt = "", ""
	f := AuditFilter{Resource: pol.ResourceName, Limit: MaxAuditLimit}
	for read := 0; read < auditScanLimit; read += f.Limit {
		recs, err := s.opt.Audit.ListAudit(ctx, f)
		if err != nil {
			return false, err
		}
		for _, r := range recs {
			switch r.Action {
			case ActionPolicyDelete:
				return false, nil
			case ActionPolicyPut:
				var got PolicyView
				if err := json.Unmarshal(r.After, &got); err != nil {
					return false, nil // unreadable: record it anew
				}
				got.CreatedAt, got.UpdatedAt = "", ""
				return got == want, nil
			}
			f.BeforeID = r.ID
		}
		if len(recs) < f.Limit {
			break
		}
	}
	return false, nil
}

// TimeFormat is how the API writes every timestamp: RFC 3339 in UTC with
// milliseconds, e.g. 2025-06-01T01:55:00.000Z.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// PolicyView is a policy as the API shows it, in GET and PUT
// /admin/policies answers and in the audit log's before and after: its
// timestamps in TimeFormat (not time.Time's default, which drops trailing
// zeros of the fraction) and its failMode never empty.
type PolicyView struct {
	ResourceName         string `json:"resourceName"`
	QuotaType            string `json:"quotaType"`
	TotalLimit           int64  `json:"totalLimit"` // in the type's unit
	ResetCron            string `json:"resetCron"`
	Timezone             string `json:"timezone"`
	LeakThresholdSeconds int64  `json:"leakThresholdSeconds"` // seconds
	FailMode             string `json:"failMode"`             // CLOSED or OPEN
	CreatedAt            string `json:"createdAt"`            // TimeFormat
	UpdatedAt            string `json:"updatedAt"`            // TimeFormat
}

// View is p as the API shows it.
func (p Policy) View() PolicyView {
	return PolicyView{
		ResourceName: p.ResourceName, QuotaType: string(p.QuotaType), TotalLimit: p.TotalLimit,
		ResetCron: p.ResetCron, Timezone: p.Timezone, LeakThresholdSeconds: p.LeakThresholdSeconds,
		FailMode: string(p.FailMode.OrDefault()), CreatedAt: p.CreatedAt.UTC().Format(TimeFormat),
		UpdatedAt: p.UpdatedAt.UTC().Format(TimeFormat),
	}
}

// policyJSON is p's View as JSON, for the audit log.
func policyJSON(p Policy) ([]byte, error) { return json.Marshal(p.View()) }
