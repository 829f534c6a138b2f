package admin

// Business lines and pool settings: each change is decided on the pools as
// they are under the resource's lock (LineConfig.ChangePools), re-cuts the
// layout, is stored, written to Redis (in the order of the commits) and
// audited.

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
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
		return pools.Change{PutLine: &l}, nil
	}
	created, err := a.change(ctx, resource, decide,
		func() error { return a.quota.WritePoolLayout(ctx, resource, lay) })
	if err != nil {
		return pools.LineLayout{}, false, err
	}
	a.changed(resource)
	ll, _ := lay.Line(l.Name)
	if before != nil && before.Tier != l.Tier {
		// The layout set the line's watermark back to its new tier's
		// (pool_layout.lua); a rebuild after Redis loss must agree.
		if err := a.journal.RecordPoolEvents(ctx, resource, []pools.Event{{AtMs: a.now().UnixMilli(), Kind: pools.KindWatermarkTier,
			Line: l.Name, Amount: ll.Tier.BaseWatermark(), Reason: fmt.Sprintf("tier %s → %s: the watermark starts at the new tier's", before.Tier, l.Tier)}}); err != nil {
			return pools.LineLayout{}, false, err
		}
	}
	return ll, created, a.audit(ctx, ActionLinePut, resource, before, l)
}

// DeleteLine removes a line that holds no open session. The ledger's open
// sessions of the line are counted in the turn (under the policy row's
// lock, in the transaction that deletes it), so a delete and a PUT of the
// same line, or two deletes, are decided one after the other; an apply is
// not part of the turn (docs/pools.md §5 says what that leaves). Errors:
// pools.ErrUnknownLine, ErrLineBusy, quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (a *Pools) DeleteLine(ctx context.Context, resource, line string) error {
	if _, err := a.Config(ctx, resource); err != nil {
		return err
	}
	busy := func(st pools.State) error {
		count := st.OpenSessions
		if count == nil {
			count = func(l string) (int64, error) { return a.lines.OpenLineSessions(ctx, resource, l) }
		}
		n, err := count(line)
		if err == nil && n > 0 {
			err = fmt.Errorf("line %s of %s holds %d open sessions: %w", line, resource, n, ErrLineBusy)
		}
		return err
	}
	var lay pools.Layout
	var before *pools.LineSpec
	var rest []pools.LineSpec
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
		if err := busy(st); err != nil {
			return pools.Change{}, err
		}
		var err error
		if lay, err = pools.Plan(st.Limit, st.Settings, rest); err != nil {
			return pools.Change{}, asValidation(err)
		}
		return pools.Change{DeleteLine: line}, nil
	}
	if _, err := a.change(ctx, resource, decide,
		func() error { return a.quota.WritePoolLayout(ctx, resource, lay) }); err != nil {
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
