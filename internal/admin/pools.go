package admin

// The pools' administration (issue 21 §1): its type and stores, a
// resource's configuration and layout, the settings stored with a policy,
// reclaims and events. Lines and settings changes are in poollines.go,
// grants and buffer releases in poolgrants.go, the status in
// poolstatus.go, the backend breakers in poolguard.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
//
// ChangePools is how lines, settings and grants are changed: one change at
// a time per resource, decided on the pools read under the lock of the
// resource's policy row and written in the same transaction, then (still
// under the lock) mirrored by then; see mysqlstore.Store.ChangePools.
type LineConfig interface {
	GetPolicy(ctx context.Context, resource string) (quota.Policy, error)
	Lines(ctx context.Context, resource string) ([]pools.LineSpec, error)
	ChangePools(ctx context.Context, resource string, since int64, at time.Time,
		decide func(pools.State) (pools.Change, error), then func() error) (bool, error)
	OpenLineSessions(ctx context.Context, resource, line string) (int64, error)
	PoolSettings(ctx context.Context, resource string) (pools.Settings, bool, error)
	PutPoolSettings(ctx context.Context, resource string, s pools.Settings, at time.Time) error
	LineReserved(ctx context.Context, resource string, periodStart time.Time) (map[string]int64, error)
}

// GrantConfig is the temporary grants' (and buffer releases') part of the
// policy store.
type GrantConfig interface {
	Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error)
	InsertGrant(ctx context.Context, resource string, g pools.GrantRecord) error
	VoidGrant(ctx context.Context, resource, id string, at int64) error
}

// PoolJournal is what the policy store keeps of the pools' history: the
// reclaims, the pool events and the audit log.
type PoolJournal interface {
	Reclaims(ctx context.Context, resource string, limit int) ([]pools.Reclaim, error)
	PutReclaim(ctx context.Context, resource string, r pools.Reclaim) error
	PoolEvents(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error)
	RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error
	RecordAudit(ctx context.Context, e quota.AuditEntry) error
}

// PoolStore is one value playing the three roles of the policy store the
// pools' administration uses (mysqlstore.Store; a sum, as
// quota.BalanceStore is: Pools keeps and calls each role on its own).
type PoolStore interface {
	LineConfig
	GrantConfig
	PoolJournal
}

// PoolLive is what the pools' administration does itself in the balance
// store (Redis): grants, buffer moves and the live state. The layout and
// the restored grants are the quota Service's (PoolQuota).
type PoolLive interface {
	PutGrant(ctx context.Context, resource string, g pools.Grant) error
	VoidGrant(ctx context.Context, resource, id string) error
	MovePools(ctx context.Context, resource string, per quota.Period, m pools.Move) (moved, free int64, err error)
	PoolModel(ctx context.Context, resource string, per quota.Period, lay pools.Layout) (*pools.Model, error)
	// CloseLine marks a line closing until bound has passed (no new
	// session opens on it meanwhile) and counts the sessions Redis holds
	// open on it; mark is the mark's deadline (ms), the token of the
	// other two. ClosingHeld says whether that mark still holds (with
	// drop, and when it does, the layout is deleted in the same step);
	// EndClosing takes it off or makes it the deleted line's tombstone
	// (redisstore.Store.CloseLine). A line's DELETE.
	CloseLine(ctx context.Context, resource, line string, bound time.Duration) (open, mark int64, err error)
	ClosingHeld(ctx context.Context, resource, line string, mark int64, drop bool) (bool, error)
	EndClosing(ctx context.Context, resource, line string, mark int64, deleted bool) error
}

// PoolQuota is what the pools' administration uses of the quota Service
// (*quota.Service), which owns the pools' part of the balance: it writes
// the layout and restores the grants (the same code as its seed step),
// and forgets its cached copy of a resource's pools after a change.
type PoolQuota interface {
	WritePoolLayout(ctx context.Context, resource string, lay pools.Layout) error
	RestorePoolGrants(ctx context.Context, resource string) error
	ForgetPolicy(resource string)
	// DrainSpareMoves journals the spare buffer's moves Redis still notes
	// (quota.DrainSpareMoves), before an event that may depend on them.
	DrainSpareMoves(ctx context.Context, resource string) error
	// RelayoutPools writes the stored layout (the moves rebuilt where
	// Redis lost it) and grants back to Redis, in the resource's turn
	// (quota.Service.RelayoutPools).
	RelayoutPools(ctx context.Context, resource string) error
}

// Periods gives a policy's period at a time (quota.Scheduler's PeriodAt).
type Periods interface {
	PeriodAt(p quota.Policy, t time.Time) (quota.Period, error)
}

// Pools is the operators' side of the pools: lines, settings, grants,
// buffer releases and reclaims. Every change is validated first (a bad
// input is a *quota.ValidationError and changes nothing), stored in the
// policy store, mirrored to Redis, audited, and forgotten by the quota
// Service's policy+pools cache (PoolQuota.ForgetPolicy; other instances
// hear of it through the policy store's announcements).
type Pools struct {
	lines   LineConfig
	grants  GrantConfig
	journal PoolJournal
	live    PoolLive
	quota   PoolQuota
	sched   Periods
	now     func() time.Time
	// closeBound is how long a line's DELETE may keep the line closed to
	// new sessions (its closing mark's lifetime; SetLineCloseBound).
	closeBound time.Duration
	// turns holds a *sync.Mutex per resource: this instance's changes of
	// one resource's pools take turns before they wait for the policy
	// row's lock (ChangePools), so that they hold one database connection
	// at a time, not one each, and a SQLite store (whose then runs after
	// the commit) writes Redis in the order of the commits. Resources are
	// operator-made, so the map stays small.
	turns sync.Map
}

// turn takes resource's turn; the caller calls the function returned.
func (a *Pools) turn(resource string) func() {
	m, _ := a.turns.LoadOrStore(resource, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// NewPools returns the pools' administration; now is time.Now when nil.
func NewPools(cfg PoolStore, live PoolLive, q PoolQuota, sched Periods, now func() time.Time) *Pools {
	if now == nil {
		now = time.Now
	}
	return &Pools{lines: cfg, grants: cfg, journal: cfg, live: live, quota: q, sched: sched, now: now,
		closeBound: DefaultLineCloseBound}
}

// DefaultLineCloseBound is the closing mark's lifetime a line's DELETE
// uses unless SetLineCloseBound says otherwise (QC_LINE_CLOSE_BOUND).
const DefaultLineCloseBound = 30 * time.Second

// SetLineCloseBound sets how long a line's DELETE may keep the line closed
// to new sessions (d > 0; call it before serving): a DELETE that dies
// after its mark leaves the line usable again after d, and one that takes
// longer than d fails (quota.ErrUnavailable) rather than delete a line a
// session may have opened on since.
func (a *Pools) SetLineCloseBound(d time.Duration) {
	if d > 0 {
		a.closeBound = d
	}
}

// changed tells the quota Service that a resource's pools changed.
func (a *Pools) changed(resource string) { a.quota.ForgetPolicy(resource) }

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
func (a *Pools) audit(ctx context.Context, action, resource string, before, after any) error {
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

// PoolConfig is a resource's pool configuration and its layout.
type PoolConfig struct {
	Policy   quota.Policy
	Settings pools.Settings
	Lines    []pools.LineSpec
	Layout   pools.Layout
}

// Config reads a resource's pool configuration. Errors:
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Pools) Config(ctx context.Context, resource string) (PoolConfig, error) {
	pol, err := a.lines.GetPolicy(ctx, resource)
	if err != nil {
		return PoolConfig{}, err
	}
	set, _, err := a.lines.PoolSettings(ctx, resource)
	if err != nil {
		return PoolConfig{}, err
	}
	lines, err := a.lines.Lines(ctx, resource)
	if err != nil {
		return PoolConfig{}, err
	}
	lay, err := pools.Plan(pol.TotalLimit, set, lines)
	if err != nil {
		return PoolConfig{}, fmt.Errorf("pools of %s: %w", resource, err)
	}
	return PoolConfig{Policy: pol, Settings: set, Lines: lines, Layout: lay}, nil
}

// CheckLayout says whether a resource's lines fit limit with the pool
// settings set (nil: those stored): nil, or a *quota.ValidationError naming
// "totalLimit" (or the settings' field). A resource without lines (or not
// created yet) fits any limit. Errors: quota.ErrUnavailable.
func (a *Pools) CheckLayout(ctx context.Context, resource string, limit int64, set *pools.Settings) error {
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

// Reclaims lists a resource's reclaims, newest first.
func (a *Pools) Reclaims(ctx context.Context, resource string) ([]pools.Reclaim, error) {
	if _, err := a.lines.GetPolicy(ctx, resource); err != nil {
		return nil, err
	}
	return a.journal.Reclaims(ctx, resource, 100)
}

// Events lists a resource's latest pool decisions, newest first.
func (a *Pools) Events(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error) {
	if _, err := a.lines.GetPolicy(ctx, resource); err != nil {
		return nil, err
	}
	return a.journal.PoolEvents(ctx, resource, limit)
}

// SetReclaim confirms (CONFIRMED: the controller executes it at its next
// tick) or cancels a reclaim. Errors: pools.ErrUnknownReclaim,
// pools.ErrReclaimState, quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Pools) SetReclaim(ctx context.Context, resource, id string, confirm bool) (pools.Reclaim, error) {
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

// change makes one change of resource's pools in resource's turn
// (LineConfig.ChangePools at now, grants expiring after now counted).
func (a *Pools) change(ctx context.Context, resource string, decide func(pools.State) (pools.Change, error), then func() error) (bool, error) {
	defer a.turn(resource)()
	now := a.now()
	return a.lines.ChangePools(ctx, resource, now.UnixMilli(), now, decide, then)
}
