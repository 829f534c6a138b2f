package admin

import (
	"context"
	"errors"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/scrape"
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

// PoolUsers is the policy store's batch read of which resources use pools
// (mysqlstore.Store.PooledOf): those with a business line or with a grant
// Grants(resource, since) lists. Names absent from the map use none.
type PoolUsers interface {
	PooledOf(ctx context.Context, resources []string, since int64) (map[string]bool, error)
}

// StatusOf is Status of each of resources (the i-th answers are
// resources[i]'s): which of them use pools is read in one batch
// (PoolUsers: one query per 500 names), and only those are read one
// resource at a time (Status), ScrapeWorkers of them at once, so a scrape
// of many used resources without lines or grants costs a query per 500 of
// them, not ~7 each, and n pooled ones ~n/ScrapeWorkers rounds of their
// reads, not n (issue 23 §1). A resource absent from the store (deleted)
// is answered as one without pools. When the store has no batch read each
// resource is read with Status. Errors, per resource: Status's; the batch
// read's error (quota.ErrUnavailable, quota.ErrCircuitOpen) for every
// resource when it fails.
func (a *Pools) StatusOf(ctx context.Context, resources []string) (sts []PoolStatus, oks []bool, errs []error) {
	sts, oks, errs = make([]PoolStatus, len(resources)), make([]bool, len(resources)), make([]error, len(resources))
	users, err := a.pooledOf(ctx, resources)
	var each []int // the resources read one at a time: those using pools
	for i, r := range resources {
		switch {
		case errors.Is(err, errors.ErrUnsupported), err == nil && users[r]:
			each = append(each, i)
		case err != nil:
			errs[i] = err
		}
	}
	scrape.Each(each, func(i int) { sts[i], oks[i], errs[i] = a.Status(ctx, resources[i]) })
	return sts, oks, errs
}

// pooledOf is the store's PoolUsers read of resources, with the since
// Grants uses; errors.ErrUnsupported when the store has none.
func (a *Pools) pooledOf(ctx context.Context, resources []string) (map[string]bool, error) {
	u, ok := a.lines.(PoolUsers)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return u.PooledOf(ctx, resources, a.now().UnixMilli())
}
