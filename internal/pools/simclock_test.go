package pools

import (
	"strings"
	"testing"
)

// oneStaticLine is a workload of one line "a"; SchemeStatic gives it the
// whole limit as its dedicated part (no shared pool, no buffer, no tiers).
func oneStaticLine(reqs ...Request) Workload {
	return Workload{Lines: []LineSpec{{Name: "a", Tier: TierGrowth, Weight: 1}}, Requests: reqs}
}

// A session holds its grant from AtMs to AtMs + DurationMs (end exclusive,
// as a grant's window): an apply arriving before the finish finds the
// quota held, one arriving at the very ms of the finish finds it given
// back — whatever the order in which the sessions began.
func TestSimulateFinishesEachSessionWhenItsDurationEnds(t *testing.T) {
	w := oneStaticLine(
		Request{AtMs: 0, Line: "a", Amount: 60, Actual: 60, DurationMs: 50_000},  // holds 60 until 50 s
		Request{AtMs: 1, Line: "a", Amount: 40, Actual: 0, DurationMs: 1000},     // holds 40 until 1001 ms, uses nothing
		Request{AtMs: 1000, Line: "a", Amount: 40, Actual: 40, DurationMs: 1000}, // 100 held: refused
		Request{AtMs: 1001, Line: "a", Amount: 40, Actual: 30, DurationMs: 1000}, // the 40 is back
	)
	r, err := Simulate(w, SimConfig{Scheme: SchemeStatic, Limit: 100, PeriodMs: 60_000, Settings: DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused != 1 || r.RefusedByReason[ReasonLineExhausted] != 1 || r.Charged != 90 {
		t.Fatalf("refused %d (%v), charged %d; want the apply at 1000 ms refused and 60 + 0 + 30 charged", r.Refused, r.RefusedByReason, r.Charged)
	}
}

// The run covers whole periods up to the one in which the last session
// finishes, and charges that session.
func TestSimulateRunsUntilTheLastSessionFinishes(t *testing.T) {
	w := oneStaticLine(Request{AtMs: 59_000, Line: "a", Amount: 10, Actual: 7, DurationMs: 2000}) // ends at 61 s
	r, err := Simulate(w, SimConfig{Scheme: SchemeStatic, Limit: 100, PeriodMs: 60_000, Settings: DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Periods != 2 || r.QuotaOffered != 200 || r.Charged != 7 {
		t.Fatalf("%d periods, %d offered, %d charged; want 2, 200, 7", r.Periods, r.QuotaOffered, r.Charged)
	}
	// A new period gives the line its limit again: the same demand in the
	// next period is granted.
	w = oneStaticLine(
		Request{AtMs: 0, Line: "a", Amount: 100, Actual: 100, DurationMs: 1000},
		Request{AtMs: 59_999, Line: "a", Amount: 1, Actual: 1, DurationMs: 1},
		Request{AtMs: 60_000, Line: "a", Amount: 100, Actual: 100, DurationMs: 1000},
	)
	if r, _ = Simulate(w, SimConfig{Scheme: SchemeStatic, Limit: 100, PeriodMs: 60_000, Settings: DefaultSettings()}); r.Refused != 1 || r.Charged != 200 || r.Periods != 2 {
		t.Fatalf("refused %d, charged %d, %d periods; want the apply at 59 999 ms refused, 200 charged over 2 periods", r.Refused, r.Charged, r.Periods)
	}
}

// Refusals are counted by kind: of applies during bursts (on the bursting
// lines), of CORE lines, and of CORE critical applies.
func TestSimulateCountsRefusalsByKind(t *testing.T) {
	w := Workload{Lines: []LineSpec{{Name: "c", Tier: TierCore, Weight: 1}, {Name: "e", Tier: TierExplore, Weight: 1}}}
	// Static: 50 each.
	for i, r := range []Request{
		{Line: "c", Amount: 50, Critical: true},              // granted: c is full
		{Line: "c", Amount: 10, Critical: true},              // refused, CORE critical
		{Line: "c", Amount: 10, Burst: true},                 // refused, CORE, in a burst
		{Line: "e", Amount: 60, Critical: true, Burst: true}, // refused, in a burst
		{Line: "e", Amount: 10, Burst: true},                 // granted, in a burst
		{Line: "e", Amount: 40, Critical: true},              // granted
	} {
		r.AtMs, r.Actual, r.DurationMs = int64(i), r.Amount, 10_000
		w.Requests = append(w.Requests, r)
	}
	r, err := Simulate(w, SimConfig{Scheme: SchemeStatic, Limit: 100, PeriodMs: 60_000, Settings: DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 6 || r.Refused != 3 || r.BurstRequests != 3 || r.BurstRefused != 2 || r.CoreRefused != 2 || r.CoreCritRefused != 1 || r.Charged != 100 {
		t.Fatalf("%+v", r)
	}
	if p := r.BurstRefusedPct(); p < 66.6 || p > 66.7 {
		t.Fatalf("refused in bursts %.2f %%, want 2 of 3", p)
	}
}

// At one instant, the first lending is the first the controller made
// (events keep their order within a tick).
func TestReactionsKeepTheOrderOfOneInstant(t *testing.T) {
	got := reactions([]Burst{{Line: "a", StartMs: 0, EndMs: 10_000}}, []Event{
		{AtMs: 5000, Kind: "LEND_REACTIVE", Line: "a"},
		{AtMs: 5000, Kind: "LEND_PREDICTIVE", Line: "a"},
	})
	if len(got["LEND_REACTIVE"]) != 1 || len(got["LEND_PREDICTIVE"]) != 0 || len(got["any"]) != 1 || got["any"][0] != 5000 {
		t.Fatalf("reactions %v, want the reactive lending at 5 s", got)
	}
	// A lending at the burst's end is outside it (the window is [start, end)).
	if got := reactions([]Burst{{Line: "a", StartMs: 0, EndMs: 10_000}}, []Event{{AtMs: 10_000, Kind: "LEND_REACTIVE", Line: "a"}}); len(got["any"]) != 0 {
		t.Fatalf("a lending at the end counted: %v", got)
	}
}

// The run's decisions all fall inside the periods it measures: the
// controller's last tick is 10 s before the end of the last period, not at
// it (a tick there would belong to a period Periods and QuotaOffered do not
// count). Here a reclaim warned at 30 s would be confirmed at 60 s, the end
// of the only period: it stays WARNED.
func TestSimulateDecidesOnlyInsideTheMeasuredPeriods(t *testing.T) {
	s := DefaultSettings()
	s.DedicatedPercent, s.BufferPercent = 40, 0 // no buffer for a short shared pool to get (guardShared)
	s.BorrowLimitPercent = 400                  // busy may use 200 + 600: all of the shared pool
	s.Elasticity = ElasticityReactive           // no predictive lending to change what busy may use
	w := Workload{Lines: []LineSpec{{Name: "busy", Tier: TierCore, Weight: 1}, {Name: "idle", Tier: TierExplore, Weight: 1}},
		Requests: []Request{{AtMs: 1, Line: "busy", Amount: 800, Actual: 800, DurationMs: 59_000, Critical: true}}}
	r, err := Simulate(w, SimConfig{Scheme: SchemeElastic, Limit: 1000, PeriodMs: 60_000, Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	if r.Periods != 1 || len(eventsOf(r.Events, "RECLAIM_WARNED")) != 1 {
		t.Fatalf("%d periods, events %v; want one period with a reclaim warned", r.Periods, r.Events)
	}
	for _, e := range r.Events {
		if e.AtMs >= int64(r.Periods)*60_000 {
			t.Fatalf("event %+v after the run's last period", e)
		}
	}
}

// A period and a limit of 0 are refused with valid settings too (not only
// through the settings' own check).
func TestSimulateRefusesAZeroPeriodOrLimit(t *testing.T) {
	w := oneStaticLine(Request{AtMs: 0, Line: "a", Amount: 1, Actual: 1, DurationMs: 1})
	for _, cfg := range []SimConfig{
		{Scheme: SchemePools, Limit: 0, PeriodMs: 60_000, Settings: DefaultSettings()},
		{Scheme: SchemePools, Limit: 1000, PeriodMs: 0, Settings: DefaultSettings()},
	} {
		if _, err := Simulate(w, cfg); err == nil || !strings.Contains(err.Error(), "period and limit must be positive") {
			t.Errorf("limit %d, period %d: %v", cfg.Limit, cfg.PeriodMs, err)
		}
	}
}
