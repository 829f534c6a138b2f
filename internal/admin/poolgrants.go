package admin

// Temporary grants and buffer releases: the operators' additions to what may
// be used, each audited.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// GrantRequest is a temporary grant or a buffer release to make. Times are
// Unix ms; EffectiveMs 0 = now.
type GrantRequest struct {
	Amount      int64
	Line        string // "" = every line (grant) or the shared pool (release)
	EffectiveMs int64
	ExpiresMs   int64 // grants: required; releases: 0 = until returned by hand
	Reason      string
}

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// checkGrant validates a request against the lines of resource; releases
// use the same rules.
func (a *Pools) checkGrant(resource string, lines []pools.LineSpec, g GrantRequest, release bool) (GrantRequest, error) {
	now := a.now().UnixMilli()
	if g.EffectiveMs == 0 {
		g.EffectiveMs = now
	}
	switch {
	case g.Amount < 1 || g.Amount > pools.MaxAmount:
		return g, &quota.ValidationError{Field: "amount", Reason: "must be 1 … 2^53-1"}
	case !release && g.ExpiresMs == 0:
		return g, &quota.ValidationError{Field: "expiresAt", Reason: "is required"}
	case g.ExpiresMs != 0 && g.ExpiresMs <= g.EffectiveMs:
		return g, &quota.ValidationError{Field: "expiresAt", Reason: "must be after effectiveAt"}
	case g.ExpiresMs != 0 && g.ExpiresMs <= now:
		return g, &quota.ValidationError{Field: "expiresAt", Reason: "must be in the future"}
	}
	if err := quota.ValidateReason(g.Reason); err != nil {
		return g, err // the rules of every other operator's reason
	}
	if g.Line != "" && !slices.ContainsFunc(lines, func(l pools.LineSpec) bool { return l.Name == g.Line }) {
		return g, &quota.ValidationError{Field: "businessLine", Reason: "is not a line of " + resource}
	}
	if release && len(lines) == 0 {
		return g, &quota.ValidationError{Field: "resourceName", Reason: "has no business lines, hence no buffer"}
	}
	return g, nil
}

// checkGrantTotal refuses a grant of amount that would take the policy's
// limit and the resource's grants not yet expired (st, read under the
// resource's lock, so that concurrent grants are counted) past
// pools.MaxAmount (2^53-1): the scripts add them up in Lua numbers, which
// are exact only up to there, so a larger total would lose or invent
// units. Releases are not counted: they lend the buffer, which is part of
// the limit. Errors: *quota.ValidationError of field "amount".
func checkGrantTotal(st pools.State, amount int64) error {
	room := pools.MaxAmount - st.Limit
	for _, g := range st.Grants {
		if g.Kind == pools.KindGrant && g.VoidedMs == 0 {
			room -= g.Amount
		}
	}
	if amount > room {
		return &quota.ValidationError{Field: "amount", Reason: fmt.Sprintf(
			"the limit and the grants not yet expired would pass 2^53-1 in all: at most %d more may be granted", max(room, 0))}
	}
	return nil
}

// AddGrant records a temporary grant (resources with or without lines).
// Concurrent grants of one resource take turns (LineConfig.ChangePools):
// each is checked against the lines and the grants stored before it.
// Errors: *quota.ValidationError, quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (a *Pools) AddGrant(ctx context.Context, resource string, req GrantRequest) (pools.GrantRecord, error) {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return pools.GrantRecord{}, err
	}
	if req, err = a.checkGrant(resource, c.Lines, req, false); err != nil {
		return pools.GrantRecord{}, err
	}
	g := pools.GrantRecord{Grant: pools.Grant{ID: newID("g"), Line: req.Line, Amount: req.Amount,
		EffectiveMs: req.EffectiveMs, ExpiresMs: req.ExpiresMs}, Kind: pools.KindGrant, Reason: req.Reason, CreatedMs: a.now().UnixMilli()}
	if err := a.quota.RestorePoolGrants(ctx, resource); err != nil {
		return pools.GrantRecord{}, err // Redis lost the others: they come back first
	}
	decide := func(st pools.State) (pools.Change, error) {
		if _, err := a.checkGrant(resource, st.Lines, req, false); err != nil {
			return pools.Change{}, err // a line removed since
		}
		if err := checkGrantTotal(st, req.Amount); err != nil {
			return pools.Change{}, err
		}
		return pools.Change{Grant: &g}, nil
	}
	if _, err := a.change(ctx, resource, decide, nil); err != nil {
		return pools.GrantRecord{}, err
	}
	if err := a.live.PutGrant(ctx, resource, g.Grant); err != nil {
		return pools.GrantRecord{}, err
	}
	a.changed(resource)
	return g, a.audit(quota.WithReason(ctx, req.Reason), ActionGrantAdd, resource, nil, g)
}

// Grants lists a resource's grants and releases not yet expired, with
// what is held of each grant now (Used) and what the line (or the shared
// pool) still holds of each release in force (Held, pools.ReleasesHeld:
// less than its amount once a spare move lent on what the line did not
// hold). When Redis cannot be read both are left 0.
func (a *Pools) Grants(ctx context.Context, resource string) ([]pools.GrantRecord, error) {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return nil, err
	}
	gs, err := a.grants.Grants(ctx, resource, a.now().UnixMilli())
	if err != nil || len(gs) == 0 {
		// No grant: nothing held of one to read from Redis (the pool
		// gauges ask every used resource at each scrape; issue 23 §1).
		return gs, err
	}
	per, err := a.sched.PeriodAt(c.Policy, a.now())
	if err != nil {
		return nil, err
	}
	if m, err := a.live.PoolModel(ctx, resource, per, c.Layout); err == nil {
		used := map[string]int64{}
		for _, g := range m.Grants {
			used[g.ID] = g.Used
		}
		for i := range gs {
			gs[i].Used = used[gs[i].ID]
		}
		pools.ReleasesHeld(gs, m, a.now().UnixMilli())
	}
	return gs, nil
}

// Voided is what a void did: the kind of what it ended and, for a buffer
// release, the buffer it gave back (Returned, in the policy's unit).
type Voided struct {
	Kind     pools.GrantKind
	Returned int64
}

// VoidGrant ends a grant now and says what it ended and gave back.
// Voiding a buffer release gives back what its line (or the shared pool)
// still holds of it (its Held, as Grants lists it: a spare move may have
// lent the rest on) as far as sessions do not hold that buffer now
// (pool_move.lua's return), never another release's part; Voided.Returned
// is what came back, recorded as a RETURN event so a rebuild after Redis
// loss agrees. The grant.void audit entry holds the grant as it was
// (before) and the operator's reason (quota.WithReason on ctx; "" when
// none was given). Errors: pools.ErrUnknownGrant,
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Pools) VoidGrant(ctx context.Context, resource, id string) (Voided, error) {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return Voided{}, err
	}
	// In the resource's turn (issue 21): the grant is read, voided and
	// its buffer given back while no other change of the pools (another
	// void, a release, a line or limit change) runs.
	var rel *pools.GrantRecord
	var in []pools.GrantRecord // the grants and releases before the void
	var before any
	var out Voided
	decide := func(st pools.State) (pools.Change, error) {
		rel, before, in, out = nil, map[string]string{"id": id}, st.Grants, Voided{} // expired: no longer read
		for i := range st.Grants {
			if st.Grants[i].ID == id {
				before, out.Kind = st.Grants[i], st.Grants[i].Kind
			}
			if st.Grants[i].ID == id && st.Grants[i].Kind == pools.KindRelease && !st.Grants[i].Voided {
				rel = &st.Grants[i]
			}
		}
		return pools.Change{VoidGrant: id}, nil
	}
	then := func() error {
		if err := a.live.VoidGrant(ctx, resource, id); err != nil {
			return err
		}
		if rel == nil {
			return nil
		}
		var err error
		out.Returned, err = a.returnRelease(ctx, c, in, *rel)
		return err
	}
	if _, err := a.change(ctx, resource, decide, then); err != nil {
		return Voided{}, err
	}
	a.changed(resource)
	return out, a.audit(ctx, ActionGrantVoid, resource, before, nil)
}

// returnRelease gives back the buffer of a voided release g: what its line
// still holds of it (pools.ReleasesHeld over gs, the records before the
// void, on the live layout), as far as sessions do not hold it now; it
// journals what moved as a RETURN event and returns it.
func (a *Pools) returnRelease(ctx context.Context, c PoolConfig, gs []pools.GrantRecord, g pools.GrantRecord) (int64, error) {
	per, err := a.sched.PeriodAt(c.Policy, a.now())
	if err != nil {
		return 0, err
	}
	m, err := a.live.PoolModel(ctx, c.Policy.ResourceName, per, c.Layout)
	if err != nil {
		return 0, err
	}
	gs = slices.Clone(gs)
	pools.ReleasesHeld(gs, m, a.now().UnixMilli())
	held := int64(0)
	for _, x := range gs {
		if x.ID == g.ID {
			held = x.Held
		}
	}
	var moved int64
	if held > 0 {
		if moved, _, err = a.live.MovePools(ctx, c.Policy.ResourceName, per, pools.Move{Op: "return", Line: g.Line, Amount: held}); err != nil {
			return 0, err
		}
	}
	// What the return found lent reflects every spare-buffer move made
	// before it: those are journalled first, so the journal never has
	// this RETURN without the move that took the rest (a rebuild would
	// lend that again).
	if err := a.quota.DrainSpareMoves(ctx, c.Policy.ResourceName); err != nil || moved <= 0 {
		return max(moved, 0), err
	}
	return moved, a.journal.RecordPoolEvents(ctx, c.Policy.ResourceName, []pools.Event{{AtMs: a.now().UnixMilli(), Kind: pools.ReturnKind,
		Line: g.Line, Amount: moved, Reason: "operator: release " + g.ID + " voided"}})
}

// ErrBufferShort: a release asks for more than the free buffer (HTTP 409).
var ErrBufferShort = quota.NewError(quota.CodeConflict, "not enough free buffer")

// Release lends part of the buffer to a line or to the shared pool, until
// ExpiresMs (the controller returns it then, as far as it is not held).
// Errors: *quota.ValidationError, ErrBufferShort, quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (a *Pools) Release(ctx context.Context, resource string, req GrantRequest) (pools.GrantRecord, error) {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return pools.GrantRecord{}, err
	}
	if req, err = a.checkGrant(resource, c.Lines, req, true); err != nil {
		return pools.GrantRecord{}, err
	}
	per, err := a.sched.PeriodAt(c.Policy, a.now())
	if err != nil {
		return pools.GrantRecord{}, err
	}
	exp := req.ExpiresMs
	if exp == 0 {
		exp = pools.MaxAmount // until returned by hand
	}
	// The layout the buffer moves in, rebuilt first where Redis lost it
	// (as an apply's seed step does): a release right after the loss was
	// a 404 "unknown business line" (or 409 with no buffer) until then.
	if err := a.quota.RelayoutPools(ctx, resource); err != nil {
		return pools.GrantRecord{}, err
	}
	// In the resource's turn (issue 21): the buffer is moved (Redis) and
	// the release recorded while no other change of the pools runs.
	var g pools.GrantRecord
	var moved int64
	decide := func(st pools.State) (pools.Change, error) {
		if _, err := a.checkGrant(resource, st.Lines, req, true); err != nil {
			return pools.Change{}, err // a line removed since
		}
		var free int64
		var err error
		if moved, free, err = a.live.MovePools(ctx, resource, per, pools.Move{Op: "release", Line: req.Line, Amount: req.Amount}); err != nil {
			return pools.Change{}, err
		}
		if moved == 0 {
			return pools.Change{}, fmt.Errorf("release %d of %s: %d free: %w", req.Amount, resource, free, ErrBufferShort)
		}
		g = pools.GrantRecord{Grant: pools.Grant{ID: newID("b"), Line: req.Line, Amount: moved, EffectiveMs: req.EffectiveMs, ExpiresMs: exp},
			Kind: pools.KindRelease, Reason: req.Reason, CreatedMs: a.now().UnixMilli(), Held: moved}
		return pools.Change{Grant: &g}, nil
	}
	if _, err := a.change(ctx, resource, decide, nil); err != nil {
		if moved > 0 {
			// Not recorded: give the buffer back rather than lend it unrecorded.
			_, _, rerr := a.live.MovePools(context.WithoutCancel(ctx), resource, per, pools.Move{Op: "return", Line: req.Line, Amount: moved})
			err = errors.Join(err, rerr)
		}
		return pools.GrantRecord{}, err
	}
	a.changed(resource)
	// The journal's RELEASE event is what rebuilds the lent buffer after
	// Redis loses it (PoolMoves): a failure to write it is the answer's.
	if err := a.journal.RecordPoolEvents(ctx, resource, []pools.Event{{AtMs: g.CreatedMs, Kind: "RELEASE", Line: req.Line, Amount: moved,
		Reason: "operator: " + req.Reason}}); err != nil {
		return g, err
	}
	return g, a.audit(quota.WithReason(ctx, req.Reason), ActionBufferRelease, resource, nil, g)
}
