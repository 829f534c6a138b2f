package pools

// The measures of a simulated run beyond counts of refusals (issue 21 §2):
// idle quota defined on its own, the per-period ceiling, EXPLORE's
// refusals by kind, and each line's use of what it was allotted.

// book is what Simulate keeps per period for those measures.
type book struct {
	limit   int64
	refused map[string]bool  // lines with a refused apply in the current period
	allot   map[string]int64 // per line, what it was allotted over all periods (static: its quota; pools: its dedicated part and buffer lent)
	charged map[string]int64 // per line, what its sessions used
	demand  map[int64]int64  // per period, what the requests arriving in it used
	idle    int64
}

func newBook(w Workload, limit, periodMs int64) *book {
	b := &book{limit: limit, refused: map[string]bool{}, allot: map[string]int64{}, charged: map[string]int64{}, demand: map[int64]int64{}}
	for _, r := range w.Requests {
		b.demand[r.AtMs/periodMs] += r.Actual
	}
	return b
}

// closePeriod counts the period that ends now: every line's allotment
// (dedicated part now and buffer lent to it) it left unused is idle when
// another line was refused in the period.
func (b *book) closePeriod(m *Model) {
	for name, l := range m.Lines {
		allot := l.OwnDedicated() + l.Buffer
		b.allot[name] += allot
		unused := max(0, l.OwnDedicated()-l.UsedDedicated) + max(0, l.Buffer-l.UsedBuffer)
		for o := range b.refused {
			if o != name {
				b.idle += unused
				break
			}
		}
	}
	clear(b.refused)
}

// finish records what the run measured into res over periods.
func (b *book) finish(res *Result, periods int) {
	res.IdleQuota = b.idle
	for p := range int64(periods) {
		res.Ceiling += min(b.limit, b.demand[p])
	}
	res.LineUtilisation = map[string]float64{}
	for name, a := range b.allot {
		res.LineUtilisation[name] = pct(b.charged[name], a)
	}
}

// IdlePct is the share of the offered quota that was allotted to a line
// and left unused in a period in which another line was refused (stranded
// quota; quota nobody asked for is not idle by this measure).
func (r Result) IdlePct() float64 { return pct(r.IdleQuota, r.QuotaOffered) }

// CeilingPct is the most any division of the limit could have charged: per
// period, the smaller of the limit and what the requests arriving in it
// used, over the offered quota.
func (r Result) CeilingPct() float64 { return pct(r.Ceiling, r.QuotaOffered) }

// UtilisationOfCeilingPct is the utilisation as a share of the ceiling.
func (r Result) UtilisationOfCeilingPct() float64 { return pct(r.Charged, r.Ceiling) }

// ExploreNonCriticalPct is the share of EXPLORE lines' refusals that fell on
// non-critical applies (100 when none was refused).
func (r Result) ExploreNonCriticalPct() float64 {
	if r.ExploreRefused == 0 {
		return 100
	}
	return pct(int64(r.ExploreRefusedNonCritical), int64(r.ExploreRefused))
}

// LineUtilisationRange is the lowest and highest utilisation of a line's
// allotment.
func (r Result) LineUtilisationRange() (lo, hi float64) {
	first := true
	for _, u := range r.LineUtilisation {
		if first || u < lo {
			lo = u
		}
		if first || u > hi {
			hi = u
		}
		first = false
	}
	return lo, hi
}
