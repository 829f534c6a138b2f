package reconcile

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// reading is one look at a period from both sides: the Redis balance and
// the ledger's totals.
type reading struct {
	per quota.Period
	bal quota.Balance
	tot quota.PeriodTotals
	// unrecorded: the live sessions the ledger does not count as reserved
	// (listed by recheck); tooMany: more of them than one correction may
	// name.
	unrecorded []string
	tooMany    bool
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

// recheck is the last look before the correction of a quiet drift (x, the
// second of two equal reads): it lists the unrecorded sessions, whose
// grants the correction keeps, then reads the period a third time. ok is
// false when the third read differs from x: something moved (a row that
// landed while the list was made changes the ledger's sums, so whenever ok
// the list and the sums agree). The list is made only for a quiet drift,
// so a busy resource never pays for it.
func (r *Reconciler) recheck(ctx context.Context, pol quota.Policy, x reading) (y reading, ok bool, err error) {
	ids, tooMany, err := r.unrecorded(ctx, pol.ResourceName)
	if err != nil {
		return x, false, err
	}
	if y, err = r.read(ctx, pol, x.per); err != nil || y.bal != x.bal || y.tot != x.tot {
		return y, false, err
	}
	y.unrecorded, y.tooMany = ids, tooMany
	return y, true, nil
}

// maxUnrecorded bounds the sessions one correction names (adjust.lua reads
// each); with more, the correction waits for the orphans among them to be
// given back (releaseOrphans, the sweeper).
const maxUnrecorded = 1000

// unrecorded lists the resource's USING sessions in Redis whose ledger row
// is not USING (none yet, CANCELLED, settled): each holds a reservation
// the ledger does not count, which its own give-back (finish, cancel,
// sweep) returns once; a drift correction keeps it rather than return it
// too (issue 22 §1). tooMany: more than maxUnrecorded (the list is cut
// there).
func (r *Reconciler) unrecorded(ctx context.Context, resource string) (ids []string, tooMany bool, err error) {
	var open []string
	// Every lease ends within the longest leak threshold of now.
	horizon := r.now().Add(time.Duration(quota.MaxLeakThresholdSeconds)*time.Second + time.Hour)
	if err := r.redis(resource, func() (err error) { open, err = r.store.OpenSessionIDs(ctx, resource, horizon); return err }); err != nil {
		return nil, false, err
	}
	err = inChunks(open, checkChunk, func(part []string) error {
		rows, err := r.sessionsByID(ctx, part)
		if err != nil {
			return err
		}
		for _, id := range part {
			if row, ok := rows[id]; !ok || row.Status != quota.StatusUsing || row.ResourceName != resource {
				ids = append(ids, id)
			}
		}
		return nil
	})
	if len(ids) > maxUnrecorded {
		return ids[:maxUnrecorded], true, err
	}
	return ids, false, err
}

// adjust writes the correction −d of a period's balance measured on x (the
// second of two quiet reads), after recheck, keeping the reservations of
// the unrecorded sessions, and reports whether it changed the balance. A
// correction not written (the drift was those reservations, or they were
// too many to name; or the balance or the ledger moved) is counted and
// reported (rep.AdjustRefused).
func (r *Reconciler) adjust(ctx context.Context, pol quota.Policy, x reading, d [2]int64, f quota.Fence, rep *Report) (bool, error) {
	y, ok, err := r.recheck(ctx, pol, x)
	if err != nil {
		return false, err
	}
	out := quota.AdjustMoved
	if ok {
		out = quota.AdjustHeld
	}
	if ok && !y.tooMany {
		err := r.redis(pol.ResourceName, func() (err error) {
			out, err = r.store.Adjust(ctx, pol.ResourceName, y.per, quota.Adjustment{
				Charged: -d[0], Reserved: -d[1], Seen: y.bal, Unrecorded: y.unrecorded,
			}, f)
			return err
		})
		if err != nil {
			return false, err
		}
	}
	switch out {
	case quota.AdjustHeld, quota.AdjustMoved:
		rep.AdjustRefused = out.String()
		r.refused.WithLabelValues(out.String()).Inc()
		r.log.Info("reconcile left a drift for a later pass", zap.String("resource", pol.ResourceName),
			zap.Time("period_start", x.per.Start), zap.String("reason", out.String()),
			zap.Int64("drift_charged", d[0]), zap.Int64("drift_reserved", d[1]), zap.Int("unrecorded", len(y.unrecorded)))
	}
	return out == quota.AdjustApplied, nil
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
			if rep.BalanceAdjusted, err = r.adjust(ctx, pol, *second, d, f, rep); err != nil {
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
	rep.EarlierPeriodAdjusted, err = r.adjust(ctx, pol, *second, first.drift(), f, rep)
	if rep.EarlierPeriodAdjusted {
		r.repairs.WithLabelValues(pol.ResourceName, "earlier_period_adjusted").Inc()
	}
	return err
}
