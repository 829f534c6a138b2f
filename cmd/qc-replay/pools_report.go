package main

import (
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// The shipped defaults of `qc-replay pools` (docs/pools.md §3 says how they
// were chosen and on which data).
const (
	// DefaultPoolsPeriod is the quota period: the seed's 5-minute window.
	DefaultPoolsPeriod = 5 * time.Minute
	// DefaultLimitFactor sizes the limit per period against the trace's
	// mean demand per period (bursts excluded).
	DefaultLimitFactor = 1.2
)

// sizeLimit is the limit per period the run gives the resource: the
// trace's demand (prompt + completion tokens) per period — the highest of
// any period (basis "peak": capacity provisioned for the trace's own peak)
// or the mean — times factor. Bursts are not counted.
func sizeLimit(tr []pools.TraceRow, periodMs int64, basis string, factor float64) int64 {
	per := map[int64]int64{}
	var total, peak int64
	for _, r := range tr {
		per[r.AtMs/periodMs] += r.Context + r.Generated
		total += r.Context + r.Generated
	}
	for _, d := range per {
		peak = max(peak, d)
	}
	base := float64(peak)
	if basis == "mean" {
		base = float64(total) / float64(tr[len(tr)-1].AtMs/periodMs+1)
	}
	return max(1, int64(base*factor))
}

// window returns the rows from fromMin to toMin (0: the end) minutes after
// the first row, with times counted from the window's start.
func window(rows []Row, fromMin, toMin float64) []pools.TraceRow {
	var out []pools.TraceRow
	if len(rows) == 0 {
		return nil
	}
	from := time.Duration(fromMin * float64(time.Minute))
	to := time.Duration(toMin * float64(time.Minute))
	for _, r := range rows {
		at := r.Time.Sub(rows[0].Time)
		if at < from || (toMin > 0 && at >= to) {
			continue
		}
		out = append(out, pools.TraceRow{AtMs: (at - from).Milliseconds(), Context: r.ContextTokens, Generated: r.GeneratedTokens})
	}
	return out
}

// schemeReport is one run's figures. Percentages are 0 … 100.
type schemeReport struct {
	UtilisationPercent float64 `json:"utilisationPercent"` // charged / (limit × periods)
	// CeilingPercent: per period, the smaller of the limit and the demand
	// arriving in it, over limit × periods: the most any division could use.
	CeilingPercent float64 `json:"ceilingPercent"`
	// UtilisationOfCeilingPercent = utilisationPercent / ceilingPercent.
	UtilisationOfCeilingPercent float64 `json:"utilisationOfCeilingPercent"`
	// IdlePercent: quota allotted to a line (static quota; dedicated part and
	// buffer lent) left unused in a period in which another line was refused,
	// over limit × periods.
	IdlePercent                       float64        `json:"idlePercent"`
	BurstRefusedPercent               float64        `json:"burstRefusedPercent"`
	RefusedPercent                    float64        `json:"refusedPercent"`
	CoreRefused                       int            `json:"coreRefused"`
	CoreCriticalRefused               int            `json:"coreCriticalRefused"`
	ExploreRefused                    int            `json:"exploreRefused"`
	ExploreRefusalsNonCriticalPercent float64        `json:"exploreRefusalsNonCriticalPercent"`
	LineUtilisationMinPercent         float64        `json:"lineUtilisationMinPercent"`
	LineUtilisationMaxPercent         float64        `json:"lineUtilisationMaxPercent"`
	Requests                          int            `json:"requests"`
	Refused                           int            `json:"refused"`
	RefusedByReason                   map[string]int `json:"refusedByReason"`
}

// poolsReport is `qc-replay pools --json`.
type poolsReport struct {
	Trace         string         `json:"trace"`
	FromMinute    float64        `json:"fromMinute"`
	ToMinute      float64        `json:"toMinute,omitempty"`
	Seed          uint64         `json:"seed"`
	PeriodSeconds float64        `json:"periodSeconds"`
	Limit         int64          `json:"limitPerPeriod"`
	Periods       int            `json:"periods"`
	Settings      pools.Settings `json:"settings"`
	Static        schemeReport   `json:"static"`
	Pools         schemeReport   `json:"pools"`
	Elastic       schemeReport   `json:"elastic"`
	Live          *liveResult    `json:"live,omitempty"`
	Speed         *speedReport   `json:"liveTimed,omitempty"`
}

func newSchemeReport(r pools.Result) schemeReport {
	lo, hi := r.LineUtilisationRange()
	by := map[string]int{}
	for k, v := range r.RefusedByReason {
		by[string(k)] = v
	}
	return schemeReport{UtilisationPercent: r.UtilisationPct(), CeilingPercent: r.CeilingPct(),
		UtilisationOfCeilingPercent: r.UtilisationOfCeilingPct(), IdlePercent: r.IdlePct(),
		BurstRefusedPercent: r.BurstRefusedPct(), RefusedPercent: r.RefusedPct(), CoreRefused: r.CoreRefused,
		CoreCriticalRefused: r.CoreCritRefused, ExploreRefused: r.ExploreRefused,
		ExploreRefusalsNonCriticalPercent: r.ExploreNonCriticalPct(), LineUtilisationMinPercent: lo,
		LineUtilisationMaxPercent: hi, Requests: r.Requests, Refused: r.Refused, RefusedByReason: by}
}

func newPoolsReport(cfg poolsConfig, limit int64, _ pools.Workload, rs []pools.Result) poolsReport {
	return poolsReport{Trace: cfg.Trace, FromMinute: cfg.FromMin, ToMinute: cfg.ToMin, Seed: cfg.Seed,
		PeriodSeconds: cfg.Period.Seconds(), Limit: limit, Periods: rs[0].Periods, Settings: cfg.Settings,
		Static: newSchemeReport(rs[0]), Pools: newSchemeReport(rs[1]), Elastic: newSchemeReport(rs[2])}
}
