package admin

// Business lines and pool settings: each change re-cuts the layout, is
// stored, written to Redis and audited.

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
)

// PutLine creates or replaces a line and reports whether it was created.
// Errors: *quota.ValidationError (the line, or the layout it would make),
// quota.ErrResourceNotFound, quota.ErrUnavailable.
func (a *Pools) PutLine(ctx context.Context, resource string, l pools.LineSpec) (pools.LineLayout, bool, error) {
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
	if err := a.quota.WritePoolLayout(ctx, resource, lay); err != nil {
		return pools.LineLayout{}, false, err
	}
	a.changed(resource)
	ll, _ := lay.Line(l.Name)
	return ll, created, a.audit(ctx, ActionLinePut, resource, before, l)
}

// DeleteLine removes a line that holds no open session. Errors:
// pools.ErrUnknownLine, ErrLineBusy, quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (a *Pools) DeleteLine(ctx context.Context, resource, line string) error {
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
	if err := a.quota.WritePoolLayout(ctx, resource, lay); err != nil {
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
func (a *Pools) PutSettings(ctx context.Context, resource string, s pools.Settings) (pools.Layout, error) {
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
		if err := a.quota.WritePoolLayout(ctx, resource, lay); err != nil {
			return pools.Layout{}, err
		}
	}
	a.changed(resource)
	return lay, a.audit(ctx, ActionPoolsPut, resource, c.Settings, s)
}
