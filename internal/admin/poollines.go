package admin

// Business lines and pool settings: each change is decided on the pools as
// they are under the resource's lock (LineConfig.ChangePools), re-cuts the
// layout, is stored, written to Redis (in the order of the commits) and
// audited.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// PutLine creates or replaces a line and reports whether it was created.
// Concurrent PUTs of one resource's lines take turns: each is checked
// against the lines the others stored (so together they never pass the
// dedicated pool nor MaxLines) and the layout each writes to Redis is
// that of its turn. Errors: *quota.ValidationError (the line, or the
// layout it would make, e.g. field "dedicated" when the lines' explicit
// amounts would pass the dedicated pool), quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (a *Pools) PutLine(ctx context.Context, resource string, l pools.LineSpec) (pools.LineLayout, bool, error) {
	if err := l.Validate(); err != nil {
		return pools.LineLayout{}, false, asValidation(err)
	}
	var lay pools.Layout
	var before *pools.LineSpec
	decide := func(st pools.State) (pools.Change, error) {
		before = nil
		lines := make([]pools.LineSpec, 0, len(st.Lines)+1)
		for _, x := range st.Lines {
			if x.Name == l.Name {
				before = &x
				continue
			}
			lines = append(lines, x)
		}
		var err error
		if lay, err = pools.Plan(st.Limit, st.Settings, append(lines, l)); err != nil {
			return pools.Change{}, asValidation(err)
		}
		ch := pools.Change{PutLine: &l}
		if before != nil && before.Tier != l.Tier {
			// The layout sets the line's watermark back to its new tier's
			// (pool_layout.lua); a rebuild after Redis loss must agree, so
			// the event is stored with the line or not at all.
			ch.Events = []pools.Event{{AtMs: a.now().UnixMilli(), Kind: pools.KindWatermarkTier, Line: l.Name,
				Amount: l.Tier.BaseWatermark(), Reason: fmt.Sprintf("tier %s → %s: the watermark starts at the new tier's", before.Tier, l.Tier)}}
		}
		return ch, nil
	}
	write := func() error {
		if err := a.quota.WritePoolLayout(ctx, resource, lay); err != nil {
			return err
		}
		// A line put (again) takes sessions: a DELETE's mark, left on the
		// deleted line as its tombstone (pool_close.lua), goes.
		return a.live.EndClosing(ctx, resource, l.Name, 0, false)
	}
	created, err := a.change(ctx, resource, decide, write)
	if err != nil {
		return pools.LineLayout{}, false, err
	}
	a.changed(resource)
	ll, _ := lay.Line(l.Name)
	return ll, created, a.audit(ctx, ActionLinePut, resource, before, l)
}

// DeleteLine removes a line that holds no open session, exactly: once it
// answers nil no session is open on the line and none can open. In the
// resource's turn (under the policy row's lock) it first marks the line
// closing in Redis' layout until the bound (SetLineCloseBound) has passed
// (PoolLive.CloseLine: meanwhile an apply on it is refused with
// pools.ErrLineClosing, HTTP 409), so that no session opens unseen, then
// counts the line's open sessions in Redis (those an apply granted before
// the mark, whose ledger row may not be written yet) and in the ledger (in
// the transaction that deletes it); with any, or when the delete fails,
// the mark is taken off again and nothing is deleted. The mark is a lease:
// when this DELETE dies before it takes the mark off, the line takes
// sessions again once the bound passed; so the layout without the line is
// written (or, for the last line, the layout dropped) before the commit
// and the mark must still hold after that write (PoolLive.ClosingHeld),
// else the DELETE fails with quota.ErrUnavailable and the line stays. Once
// committed, the mark becomes the deleted line's tombstone, which does not
// expire (a layout written from a read older than this commit, which
// brings the line back into Redis, does not reopen it); a PUT of the line
// takes it off. Errors: pools.ErrUnknownLine, ErrLineBusy,
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Pools) DeleteLine(ctx context.Context, resource, line string) error {
	if _, err := a.Config(ctx, resource); err != nil {
		return err
	}
	var lay pools.Layout
	var before *pools.LineSpec
	var rest []pools.LineSpec
	var mark int64 // the closing mark's deadline (ms); 0 = not marked
	decide := func(st pools.State) (pools.Change, error) {
		before, rest = nil, nil
		for _, x := range st.Lines {
			if x.Name == line {
				before = &x
			} else {
				rest = append(rest, x)
			}
		}
		if before == nil {
			return pools.Change{}, fmt.Errorf("line %s of %s: %w", line, resource, pools.ErrUnknownLine)
		}
		var err error
		if lay, err = pools.Plan(st.Limit, st.Settings, rest); err != nil {
			return pools.Change{}, asValidation(err)
		}
		live, m, err := a.closeLine(ctx, resource, line, st)
		if err != nil {
			return pools.Change{}, err
		}
		mark = m
		count := st.OpenSessions
		if count == nil {
			count = func(l string) (int64, error) { return a.lines.OpenLineSessions(ctx, resource, l) }
		}
		n, err := count(line)
		if err != nil {
			return pools.Change{}, err
		}
		if n > 0 || live > 0 {
			return pools.Change{}, fmt.Errorf("line %s of %s holds %d open sessions (%d in the ledger): %w",
				line, resource, max(n, live), n, ErrLineBusy)
		}
		return pools.Change{DeleteLine: line}, nil
	}
	write := func() error { return a.writeWithoutLine(ctx, resource, line, mark, lay) }
	if _, err := a.change(ctx, resource, decide, write); err != nil {
		if mark != 0 {
			err = a.endFailedDelete(ctx, resource, line, mark, err)
		}
		return err
	}
	// Committed: the mark becomes the tombstone. Should that write fail
	// the mark still expires after the bound, with the line gone from the
	// store and from Redis' layout.
	_ = a.live.EndClosing(context.WithoutCancel(ctx), resource, line, mark, true)
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

// errCloseBoundPassed: a line's DELETE took longer than its closing mark's
// bound (or Redis lost the mark), so a session may have opened on the line
// meanwhile: the DELETE is not committed (HTTP 503; retry it).
var errCloseBoundPassed = fmt.Errorf("the line's closing mark expired or was lost before its DELETE finished: %w", quota.ErrUnavailable)

// writeWithoutLine writes a line's DELETE's layout lay (without the line)
// to Redis and checks that the DELETE's closing mark held until then
// (PoolLive.ClosingHeld): from the mark to that write no apply could open
// a session on the line, and after it the line is not in Redis' layout.
// The last line's layout (none) is dropped in the step that checks.
// Errors: errCloseBoundPassed, the stores'.
func (a *Pools) writeWithoutLine(ctx context.Context, resource, line string, mark int64, lay pools.Layout) error {
	last := len(lay.Lines) == 0
	if !last {
		if err := a.quota.WritePoolLayout(ctx, resource, lay); err != nil {
			return err
		}
	}
	held, err := a.live.ClosingHeld(ctx, resource, line, mark, last)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("delete line %s of %s: %w", line, resource, errCloseBoundPassed)
	}
	return nil
}

// endFailedDelete ends the closing mark of a DELETE that answered err:
// refused or failed, the line stays and takes sessions again. On SQLite
// the layout's write follows the commit (mysqlstore.Store.ChangePools), so
// a failed write can come after the line was deleted: then the mark
// becomes the tombstone instead, so that no session opens on the deleted
// line Redis' layout may still list. Returns err, with what failed here.
func (a *Pools) endFailedDelete(ctx context.Context, resource, line string, mark int64, err error) error {
	ctx = context.WithoutCancel(ctx)
	lines, lerr := a.lines.Lines(ctx, resource)
	deleted := lerr == nil && !slices.ContainsFunc(lines, func(l pools.LineSpec) bool { return l.Name == line })
	if rerr := a.live.EndClosing(ctx, resource, line, mark, deleted); rerr != nil {
		return fmt.Errorf("%w (and the line stays closed to new sessions until its closing mark expires: %w)", err, rerr)
	}
	return err
}

// closeLine marks line closing in Redis' layout and counts the sessions
// Redis holds open on it (PoolLive.CloseLine); where Redis' layout lacks
// the line (it lost the layout) the layout of st is written first.
func (a *Pools) closeLine(ctx context.Context, resource, line string, st pools.State) (open, mark int64, err error) {
	open, mark, err = a.live.CloseLine(ctx, resource, line, a.closeBound)
	if !errors.Is(err, pools.ErrUnknownLine) {
		return open, mark, err
	}
	cur, err := pools.Plan(st.Limit, st.Settings, st.Lines)
	if err != nil {
		return 0, 0, asValidation(err)
	}
	if err := a.quota.WritePoolLayout(ctx, resource, cur); err != nil {
		return 0, 0, err
	}
	return a.live.CloseLine(ctx, resource, line, a.closeBound)
}

// PutSettings replaces a resource's pool settings, in turn with the
// changes of its lines (PutLine). Errors: *quota.ValidationError,
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Pools) PutSettings(ctx context.Context, resource string, s pools.Settings) (pools.Layout, error) {
	if err := s.Validate(); err != nil {
		return pools.Layout{}, asValidation(err)
	}
	var lay pools.Layout
	var before pools.Settings
	var lined bool
	decide := func(st pools.State) (pools.Change, error) {
		before, lined = st.Settings, len(st.Lines) > 0
		var err error
		if lay, err = pools.Plan(st.Limit, s, st.Lines); err != nil {
			return pools.Change{}, asValidation(err)
		}
		return pools.Change{Settings: &s}, nil
	}
	write := func() error {
		if !lined {
			return nil
		}
		return a.quota.WritePoolLayout(ctx, resource, lay)
	}
	if _, err := a.change(ctx, resource, decide, write); err != nil {
		return pools.Layout{}, err
	}
	a.changed(resource)
	return lay, a.audit(ctx, ActionPoolsPut, resource, before, s)
}

// SettingsStored is what PutSettings does after its commit, for pool
// settings a policy PUT stored with the policy in its transaction
// (quota.Policy.Pools): the quota Service's cached copy of the pools is
// dropped and the change audited as pools.put (before: the settings
// stored until then; nothing when they are the same). Errors: the audit
// log's.
func (a *Pools) SettingsStored(ctx context.Context, resource string, before, after pools.Settings) error {
	a.changed(resource)
	if before == after {
		return nil
	}
	return a.audit(ctx, ActionPoolsPut, resource, before, after)
}
