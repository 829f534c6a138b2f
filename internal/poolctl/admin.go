package poolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Audit actions of the pools' admin surface.
const (
	ActionLinePut        = "line.put"
	ActionLineDelete     = "line.delete"
	ActionPoolsPut       = "pools.put"
	ActionGrantAdd       = "grant.add"
	ActionGrantVoid      = "grant.void"
	ActionBufferRelease  = "buffer.release"
	ActionReclaimConfirm = "reclaim.confirm"
	ActionReclaimCancel  = "reclaim.cancel"
)

// ErrLineBusy: a line with open sessions cannot be deleted (HTTP 409).
var ErrLineBusy = quota.NewError(quota.CodeConflict, "business line has open sessions")

// LineConfig is the lines' part of the policy store (MySQL): a resource's
// policy, business lines and pool settings.
type LineConfig interface {
	GetPolicy(ctx context.Context, resource string) (quota.Policy, error)
	Lines(ctx context.Context, resource string) ([]pools.LineSpec, error)
	PutLine(ctx context.Context, resource string, l pools.LineSpec, at time.Time) (bool, error)
	DeleteLine(ctx context.Context, resource, line string) error
	OpenLineSessions(ctx context.Context, resource, line string) (int64, error)
	PoolSettings(ctx context.Context, resource string) (pools.Settings, bool, error)
	PutPoolSettings(ctx context.Context, resource string, s pools.Settings, at time.Time) error
	LineReserved(ctx context.Context, resource string, periodStart time.Time) (map[string]int64, error)
}

// GrantConfig is the temporary grants' (and buffer releases') part of the
// policy store, with what the ledger's sessions hold of each.
type GrantConfig interface {
	Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error)
	InsertGrant(ctx context.Context, resource string, g pools.GrantRecord) error
	VoidGrant(ctx context.Context, resource, id string, at int64) error
	GrantsHeld(ctx context.Context, resource string, since int64) (pools.GrantUse, error)
}

// PoolJournal is what the policy store keeps of the pools' history: the
// reclaims, the pool events (and the moves they add up to) and the audit
// log.
type PoolJournal interface {
	Reclaims(ctx context.Context, resource string, limit int) ([]pools.Reclaim, error)
	PutReclaim(ctx context.Context, resource string, r pools.Reclaim) error
	PoolEvents(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error)
	RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error
	RecordAudit(ctx context.Context, e quota.AuditEntry) error
	PoolMoves(ctx context.Context, resource string) (pools.Moves, error)
}

// ConfigStore is one value playing the three roles of the policy store
// the Admin uses (mysqlstore.Store; a sum, as quota.BalanceStore is: the
// Admin keeps and calls each role on its own).
type ConfigStore interface {
	LineConfig
	GrantConfig
	PoolJournal
}

// LiveStore is the pools' part of the balance store (Redis).
type LiveStore interface {
	SetPoolLayout(ctx context.Context, resource string, lay pools.Layout, moves *pools.Moves) (bool, error)
	RestoreGrants(ctx context.Context, resource string, gs []pools.Grant, open []pools.OpenDraw) (bool, error)
	PutGrant(ctx context.Context, resource string, g pools.Grant) error
	VoidGrant(ctx context.Context, resource, id string) error
	MovePools(ctx context.Context, resource string, per quota.Period, m pools.Move) (moved, free int64, err error)
	PoolModel(ctx context.Context, resource string, per quota.Period, lay pools.Layout) (*pools.Model, error)
}

// Admin is the operators' side of the pools: lines, settings, grants,
// buffer releases and reclaims. Every change is validated first (a bad
// input is a *quota.ValidationError and changes nothing), stored in the
// policy store, mirrored to Redis, and audited.
type Admin struct {
	lines   LineConfig
	grants  GrantConfig
	journal PoolJournal
	live    LiveStore
	sched   Scheduler
	now     func() time.Time
	// onChange is told of every change to a resource's lines or grants
	// (the Source's cache).
	onChange func(resource string)
}

func (a *Admin) changed(resource string) {
	if a.onChange != nil {
		a.onChange(resource)
	}
}

// NewAdmin returns the admin surface; now is time.Now when nil.
func NewAdmin(cfg ConfigStore, live LiveStore, sched Scheduler, now func() time.Time) *Admin {
	if now == nil {
		now = time.Now
	}
	return &Admin{lines: cfg, grants: cfg, journal: cfg, live: live, sched: sched, now: now}
}

// asValidation turns a *pools.InputError into a *quota.ValidationError.
func asValidation(err error) error {
	var ie *pools.InputError
	if errors.As(err, &ie) {
		return &quota.ValidationError{Field: ie.Field, Reason: ie.Reason}
	}
	return err
}

// audit records a change; its reason is the operator's (quota.WithReason on
// ctx; "" when none was given).
func (a *Admin) audit(ctx context.Context, action, resource string, before, after any) error {
	enc := func(v any) json.RawMessage {
		if v == nil {
			return nil
		}
		b, _ := json.Marshal(v)
		return b
	}
	return a.journal.RecordAudit(context.WithoutCancel(ctx), quota.AuditEntry{At: a.now().UTC().Truncate(time.Millisecond),
		Actor: quota.ActorFrom(ctx), Action: action, Resource: resource, Before: enc(before), After: enc(after),
		Reason: quota.ReasonFrom(ctx)})
}

// Config is a resource's pool configuration and its layout.
type Config struct {
	Policy   quota.Policy
	Settings pools.Settings
	Lines    []pools.LineSpec
	Layout   pools.Layout
}

// Config reads a resource's pool configuration. Errors:
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Admin) Config(ctx context.Context, resource string) (Config, error) {
	pol, err := a.lines.GetPolicy(ctx, resource)
	if err != nil {
		return Config{}, err
	}
	set, _, err := a.lines.PoolSettings(ctx, resource)
	if err != nil {
		return Config{}, err
	}
	lines, err := a.lines.Lines(ctx, resource)
	if err != nil {
		return Config{}, err
	}
	lay, err := pools.Plan(pol.TotalLimit, set, lines)
	if err != nil {
		return Config{}, fmt.Errorf("pools of %s: %w", resource, err)
	}
	return Config{Policy: pol, Settings: set, Lines: lines, Layout: lay}, nil
}

// Relayout writes a resource's layout to Redis (after its limit, settings
// or lines changed, or after Redis lost it).
func (a *Admin) Relayout(ctx context.Context, resource string) error {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return err
	}
	return a.writeLayout(ctx, resource, c.Layout)
}

// writeLayout writes lay to Redis; when Redis has no layout of the resource
// (it lost it), with the moves rebuilt from the policy store (PoolMoves).
// An empty layout removes the pools.
func (a *Admin) writeLayout(ctx context.Context, resource string, lay pools.Layout) error {
	ok, err := a.live.SetPoolLayout(ctx, resource, lay, nil)
	if err != nil || ok {
		return err
	}
	moves, err := a.journal.PoolMoves(ctx, resource)
	if err != nil {
		return err
	}
	_, err = a.live.SetPoolLayout(ctx, resource, lay, &moves)
	return err
}

// RestoreGrants writes a resource's temporary grants that have not expired
// back to Redis, with what sessions hold of each (rebuilt from the ledger),
// unless Redis has them. Call it before the period's pool counters are
// seeded and before a grant is added.
func (a *Admin) RestoreGrants(ctx context.Context, resource string) error {
	now := a.now().UnixMilli()
	recs, err := a.grants.Grants(ctx, resource, now)
	if err != nil {
		return err
	}
	var gs []pools.Grant
	var open []pools.OpenDraw
	since := now
	for _, g := range recs {
		if g.Kind == pools.KindGrant && !g.Voided {
			gs = append(gs, g.Grant)
			since = min(since, g.EffectiveMs)
		}
	}
	if len(gs) > 0 {
		held, err := a.grants.GrantsHeld(ctx, resource, since)
		if err != nil {
			return err
		}
		for i := range gs {
			gs[i].Used = held.Settled[gs[i].ID]
		}
		open = held.Open
	}
	_, err = a.live.RestoreGrants(ctx, resource, gs, open)
	return err
}

// PutLine creates or replaces a line and reports whether it was created.
// Errors: *quota.ValidationError (the line, or the layout it would make),
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Admin) PutLine(ctx context.Context, resource string, l pools.LineSpec) (pools.LineLayout, bool, error) {
	if err := l.Validate(); err != nil {
		return pools.LineLayout{}, false, asValidation(err)
	}
	c, err := a.Config(ctx, resource)
	if err != nil {
		return pools.LineLayout{}, false, err
	}
	var before *pools.LineSpec
	lines := make([]pools.LineSpec, 0, len(c.Lines)+1)
	for _, x := range c.Lines {
		if x.Name == l.Name {
			before = &x
			continue
		}
		lines = append(lines, x)
	}
	lay, err := pools.Plan(c.Policy.TotalLimit, c.Settings, append(lines, l))
	if err != nil {
		return pools.LineLayout{}, false, asValidation(err)
	}
	created, err := a.lines.PutLine(ctx, resource, l, a.now())
	if err != nil {
		return pools.LineLayout{}, false, err
	}
	if err := a.writeLayout(ctx, resource, lay); err != nil {
		return pools.LineLayout{}, false, err
	}
	a.changed(resource)
	ll, _ := lay.Line(l.Name)
	return ll, created, a.audit(ctx, ActionLinePut, resource, before, l)
}

// DeleteLine removes a line that holds no open session. Errors:
// pools.ErrUnknownLine, ErrLineBusy, quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (a *Admin) DeleteLine(ctx context.Context, resource, line string) error {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return err
	}
	var before *pools.LineSpec
	var rest []pools.LineSpec
	for _, x := range c.Lines {
		if x.Name == line {
			before = &x
		} else {
			rest = append(rest, x)
		}
	}
	if before == nil {
		return fmt.Errorf("line %s of %s: %w", line, resource, pools.ErrUnknownLine)
	}
	n, err := a.lines.OpenLineSessions(ctx, resource, line)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("line %s of %s holds %d open sessions: %w", line, resource, n, ErrLineBusy)
	}
	lay, err := pools.Plan(c.Policy.TotalLimit, c.Settings, rest)
	if err != nil {
		return asValidation(err)
	}
	if err := a.lines.DeleteLine(ctx, resource, line); err != nil {
		return err
	}
	if err := a.writeLayout(ctx, resource, lay); err != nil {
		return err
	}
	a.changed(resource)
	if len(rest) == 0 {
		// The pools' moves went with the last line: a rebuild starts after this.
		if err := a.journal.RecordPoolEvents(ctx, resource, []pools.Event{{AtMs: a.now().UnixMilli(), Kind: pools.KindPoolsCleared,
			Reason: "the last business line was removed: the pools' moves are gone"}}); err != nil {
			return err
		}
	}
	return a.audit(ctx, ActionLineDelete, resource, before, nil)
}

// PutSettings replaces a resource's pool settings. Errors:
// *quota.ValidationError, quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Admin) PutSettings(ctx context.Context, resource string, s pools.Settings) (pools.Layout, error) {
	if err := s.Validate(); err != nil {
		return pools.Layout{}, asValidation(err)
	}
	c, err := a.Config(ctx, resource)
	if err != nil {
		return pools.Layout{}, err
	}
	lay, err := pools.Plan(c.Policy.TotalLimit, s, c.Lines)
	if err != nil {
		return pools.Layout{}, asValidation(err)
	}
	if err := a.lines.PutPoolSettings(ctx, resource, s, a.now()); err != nil {
		return pools.Layout{}, err
	}
	if len(c.Lines) > 0 {
		if err := a.writeLayout(ctx, resource, lay); err != nil {
			return pools.Layout{}, err
		}
	}
	a.changed(resource)
	return lay, a.audit(ctx, ActionPoolsPut, resource, c.Settings, s)
}

// CheckLayout says whether a resource's lines fit limit with the pool
// settings set (nil: those stored): nil, or a *quota.ValidationError naming
// "totalLimit" (or the settings' field). A resource without lines (or not
// created yet) fits any limit. Errors: quota.ErrUnavailable.
func (a *Admin) CheckLayout(ctx context.Context, resource string, limit int64, set *pools.Settings) error {
	if set != nil {
		if err := set.Validate(); err != nil {
			return asValidation(err)
		}
	}
	lines, err := a.lines.Lines(ctx, resource)
	if err != nil || len(lines) == 0 {
		return err
	}
	s := set
	if s == nil {
		cur, _, err := a.lines.PoolSettings(ctx, resource)
		if err != nil {
			return err
		}
		s = &cur
	}
	if _, err := pools.Plan(limit, *s, lines); err != nil {
		field := "totalLimit"
		if set != nil {
			field = "pools"
		}
		return &quota.ValidationError{Field: field, Reason: "does not fit the business lines of " + resource + ": " + err.Error()}
	}
	return nil
}

// StoreSettings stores a resource's pool settings for the limit it is about
// to have (PUT and PATCH /admin/policies/{r} with "pools"), after
// CheckLayout; the Service's PutPolicy then writes the layout with the new
// limit. The resource need not exist yet. Errors: *quota.ValidationError,
// quota.ErrUnavailable.
func (a *Admin) StoreSettings(ctx context.Context, resource string, limit int64, set pools.Settings) error {
	if err := a.CheckLayout(ctx, resource, limit, &set); err != nil {
		return err
	}
	before, _, err := a.lines.PoolSettings(ctx, resource)
	if err != nil {
		return err
	}
	if err := a.lines.PutPoolSettings(ctx, resource, set, a.now()); err != nil {
		return err
	}
	a.changed(resource)
	return a.audit(ctx, ActionPoolsPut, resource, before, set)
}

// Reclaims lists a resource's reclaims, newest first.
func (a *Admin) Reclaims(ctx context.Context, resource string) ([]pools.Reclaim, error) {
	if _, err := a.lines.GetPolicy(ctx, resource); err != nil {
		return nil, err
	}
	return a.journal.Reclaims(ctx, resource, 100)
}

// Events lists a resource's latest pool decisions, newest first.
func (a *Admin) Events(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error) {
	if _, err := a.lines.GetPolicy(ctx, resource); err != nil {
		return nil, err
	}
	return a.journal.PoolEvents(ctx, resource, limit)
}

// SetReclaim confirms (CONFIRMED: the controller executes it at its next
// tick) or cancels a reclaim. Errors: pools.ErrUnknownReclaim,
// pools.ErrReclaimState, quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Admin) SetReclaim(ctx context.Context, resource, id string, confirm bool) (pools.Reclaim, error) {
	rs, err := a.Reclaims(ctx, resource)
	if err != nil {
		return pools.Reclaim{}, err
	}
	for _, r := range rs {
		if r.ID != id {
			continue
		}
		before := r
		switch {
		case confirm && r.State == pools.ReclaimWarned:
			r.State = pools.ReclaimConfirmed
		case !confirm && (r.State == pools.ReclaimWarned || r.State == pools.ReclaimConfirmed):
			r.State = pools.ReclaimCancelled
		default:
			return r, fmt.Errorf("reclaim %s is %s: %w", id, r.State, pools.ErrReclaimState)
		}
		r.UpdateMs = a.now().UnixMilli()
		if err := a.journal.PutReclaim(ctx, resource, r); err != nil {
			return r, err
		}
		action := ActionReclaimCancel
		if confirm {
			action = ActionReclaimConfirm
		}
		return r, a.audit(ctx, action, resource, before, r)
	}
	return pools.Reclaim{}, fmt.Errorf("reclaim %s of %s: %w", id, resource, pools.ErrUnknownReclaim)
}

// Status is a resource's pools now: the layout, each line in the current
// period, the active grants. Lines is empty for a resource without lines.
type Status struct {
	Settings pools.Settings
	Layout   pools.Layout
	Model    *pools.Model // the live state (counters of the current period)
	Grants   []pools.GrantRecord
	// Reserved is what each line's open sessions hold (the ledger's USING
	// rows of the period); the rest of a line's use is charged.
	Reserved map[string]int64
}

// Status reads a resource's pools; ok is false when it uses none (no
// lines, no grants). Errors: quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Admin) Status(ctx context.Context, resource string) (Status, bool, error) {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return Status{}, false, err
	}
	gs, err := a.Grants(ctx, resource)
	if err != nil {
		return Status{}, false, err
	}
	if len(c.Lines) == 0 && len(gs) == 0 {
		return Status{}, false, nil
	}
	per, err := a.sched.PeriodAt(c.Policy, a.now())
	if err != nil {
		return Status{}, false, err
	}
	m, err := a.live.PoolModel(ctx, resource, per, c.Layout)
	if err != nil {
		return Status{}, false, err
	}
	st := Status{Settings: c.Settings, Layout: c.Layout, Model: m, Grants: gs}
	if len(c.Lines) > 0 {
		if st.Reserved, err = a.lines.LineReserved(ctx, resource, per.Start); err != nil {
			return Status{}, false, err
		}
	}
	return st, true, nil
}
