package reconcile

import (
	"context"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// reading is one look at a period from both sides: the Redis balance and
// the ledger's totals.
type reading struct {
	per quota.Period
	bal quota.Balance
	tot quota.PeriodTotals
}

// drift is Redis minus the ledger: charged, reserved; zero while the
// period has no balance in Redis (it will be seeded from the ledger).
func (x reading) drift() [2]int64 {
	if !x.bal.Exists {
		return [2]int64{}
	}
	return [2]int64{x.bal.Charged - x.tot.Charged, x.bal.Reserved - x.tot.Reserved}
}

// read reads the current period's balance, then its ledger totals.
func (r *Reconciler) read(ctx context.Context, pol quota.Policy, per quota.Period) (reading, error) {
	x := reading{per: per}
	err := r.redis(pol.ResourceName, func() (err error) {
		x.bal, err = r.store.Balance(ctx, pol.ResourceName, per)
		return err
	})
	if err != nil {
		return x, err
	}
	err = r.mysql(func() (err error) {
		x.tot, err = r.ledger.PeriodTotals(ctx, pol.ResourceName, per.Start)
		return err
	})
	return x, err
}

// readTwice is the two-read drift check: it reads the current period and,
// when the balance exists and differs from the ledger, reads it again
// Settle later. In-flight requests make a momentary difference; one that is
// still there, unchanged, after Settle (longer than a ledger write may
// take) is real. second is nil when one read was enough.
func (r *Reconciler) readTwice(ctx context.Context, pol quota.Policy) (first reading, second *reading, err error) {
	per, err := r.sched.PeriodAt(pol, r.now())
	if err != nil {
		return first, nil, err
	}
	return r.readPeriodTwice(ctx, pol, per)
}

// readPeriodTwice is readTwice for the period per.
func (r *Reconciler) readPeriodTwice(ctx context.Context, pol quota.Policy, per quota.Period) (first reading, second *reading, err error) {
	if first, err = r.read(ctx, pol, per); err != nil || !first.bal.Exists || first.drift() == [2]int64{} {
		return first, nil, err
	}
	select {
	case <-ctx.Done():
		return first, nil, ctx.Err()
	case <-time.After(r.cfg.Settle):
	}
	again, err := r.read(ctx, pol, per)
	if err != nil {
		return first, nil, err
	}
	return first, &again, nil
}

// quiet reports a pass whose drift was zero or not stable (in-flight noise)
// and so checked no session; d is the first read's drift.
func (r *Reconciler) quiet(pol quota.Policy, rep Report, d [2]int64) Report {
	rep.DriftCharged, rep.DriftReserved = d[0], d[1]
	r.exportDrift(pol, d)
	return rep
}

// exportDrift sets the drift gauges of pol's resource.
func (r *Reconciler) exportDrift(pol quota.Policy, d [2]int64) {
	if g, ok := r.drift[pol.QuotaType.Unit()]; ok {
		g.WithLabelValues(pol.ResourceName, "charged").Set(float64(d[0]))
		g.WithLabelValues(pol.ResourceName, "reserved").Set(float64(d[1]))
	}
}

// balance measures the current period's drift with readTwice and corrects
// it by delta (never by overwriting) when nothing moved on either side
// between the two reads: then no request was in flight between the stores,
// and the difference is real. Under steady traffic this waits for a quiet
// moment; the drift is reported meanwhile.
//
// The correction is fenced by the pass's lock (f): if the lock expired and
// another instance took it since, adjust.lua refuses it (quota.ErrLockLost)
// rather than write a drift the new holder may be correcting too.
func (r *Reconciler) balance(ctx context.Context, pol quota.Policy, rep *Report, f quota.Fence) error {
	first, second, err := r.readTwice(ctx, pol)
	rep.PeriodStart = first.per.Start
	if err != nil {
		return err
	}
	if err := r.earlierPeriod(ctx, pol, first.per, rep, f); err != nil {
		return err
	}
	if !first.bal.Exists {
		return nil // no balance yet: it will be seeded from the ledger
	}
	d := first.drift()
	last := first
	if second != nil {
		quiet := second.bal.Exists && second.bal.Charged == first.bal.Charged &&
			second.bal.Reserved == first.bal.Reserved && second.tot == first.tot
		if quiet {
			err := r.redis(pol.ResourceName, func() (err error) {
				rep.BalanceAdjusted, err = r.store.Adjust(ctx, pol.ResourceName, first.per, -d[0], -d[1], f)
				return err
			})
			if err != nil {
				return err
			}
			if rep.BalanceAdjusted {
				r.repairs.WithLabelValues(pol.ResourceName, "balance_adjusted").Inc()
			}
		}
		last = *second
	}
	rep.RedisCharged, rep.RedisReserved = last.bal.Charged, last.bal.Reserved
	rep.LedgerCharged, rep.LedgerReserved = last.tot.Charged, last.tot.Reserved
	rep.DriftCharged, rep.DriftReserved = d[0], d[1]
	r.exportDrift(pol, d)
	return nil
}

// earlierPeriod corrects a stable drift of the period before cur while its
// balance is still in Redis (known gap G5: only the current period was
// repaired, so a drift left in the previous one — an orphan swept after the
// period ended, say — stayed, and late finishes of that period answered a
// wrong remainingQuota). No grant comes from an earlier period, so limits
// were never at risk; the answers of its late finishes were. The same
// two-read rule applies: corrected only when neither side moved.
func (r *Reconciler) earlierPeriod(ctx context.Context, pol quota.Policy, cur quota.Period, rep *Report, f quota.Fence) error {
	if !cur.Start.After(pol.CreatedAt) {
		return nil // the first period: nothing before it
	}
	prev, err := r.sched.PeriodAt(pol, cur.Start.Add(-time.Millisecond))
	if err != nil || prev.Start.Equal(cur.Start) {
		return err
	}
	first, second, err := r.readPeriodTwice(ctx, pol, prev)
	if err != nil || second == nil || !second.bal.Exists || second.bal != first.bal || second.tot != first.tot {
		return err
	}
	d := first.drift()
	return r.redis(pol.ResourceName, func() (err error) {
		rep.EarlierPeriodAdjusted, err = r.store.Adjust(ctx, pol.ResourceName, prev, -d[0], -d[1], f)
		if rep.EarlierPeriodAdjusted {
			r.repairs.WithLabelValues(pol.ResourceName, "earlier_period_adjusted").Inc()
		}
		return err
	})
}
