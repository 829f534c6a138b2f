package admin

import (
	"context"

	"github.com/quotacenter/quota-center/internal/pools"
)

// PoolStatus is a resource's pools now: the layout, each line in the current
// period, the active grants. Lines is empty for a resource without lines.
type PoolStatus struct {
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
func (a *Pools) Status(ctx context.Context, resource string) (PoolStatus, bool, error) {
	c, err := a.Config(ctx, resource)
	if err != nil {
		return PoolStatus{}, false, err
	}
	gs, err := a.Grants(ctx, resource)
	if err != nil {
		return PoolStatus{}, false, err
	}
	if len(c.Lines) == 0 && len(gs) == 0 {
		return PoolStatus{}, false, nil
	}
	per, err := a.sched.PeriodAt(c.Policy, a.now())
	if err != nil {
		return PoolStatus{}, false, err
	}
	m, err := a.live.PoolModel(ctx, resource, per, c.Layout)
	if err != nil {
		return PoolStatus{}, false, err
	}
	st := PoolStatus{Settings: c.Settings, Layout: c.Layout, Model: m, Grants: gs}
	if len(c.Lines) > 0 {
		if st.Reserved, err = a.lines.LineReserved(ctx, resource, per.Start); err != nil {
			return PoolStatus{}, false, err
		}
	}
	return st, true, nil
}
