package quota

import (
	"context"
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

// poolSourceStub is a PoolSource in process.
type poolSourceStub struct {
	use         PoolUse
	err         error
	relayoutErr error
	limitErr    error
	relayouts   int
}

func (p *poolSourceStub) PoolsOf(context.Context, string) (PoolUse, error) { return p.use, p.err }
func (p *poolSourceStub) Relayout(context.Context, string) error {
	p.relayouts++
	return p.relayoutErr
}
func (p *poolSourceStub) CheckLimit(context.Context, string, int64) error { return p.limitErr }

var twoLines = PoolUse{Lines: map[string]pools.Tier{"chat": pools.TierCore, "lab": pools.TierExplore}}

// A resource with business lines requires one of its lines; one without
// refuses any; the store is told the line, whether the call is critical
// and whether it continues running work.
func TestApplyBusinessLineRules(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		use   PoolUse
		line  string
		field string
	}{
		{"line required", twoLines, "", "businessLine"},
		{"no lines", PoolUse{}, "chat", "businessLine"},
		{"no lines, grants", PoolUse{Grants: true}, "chat", "businessLine"},
		{"not a line", twoLines, "ads", "businessLine"},
	} {
		st := &stubs{}
		svc := newStubService(st, Options{Pools: &poolSourceStub{use: c.use}})
		if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 1, BusinessLine: c.line}); field(err) != c.field || st.n("Apply") != 0 {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	var cmd ApplyCmd
	st := &stubs{apply: func(c ApplyCmd) (ApplyResult, error) {
		cmd = c
		return ApplyResult{Outcome: ApplyGranted, Granted: 5, PeriodStart: c.Period.Start,
			Drawn: PoolSplit{Dedicated: 3, Shared: 2}, Tight: true}, nil
	}}
	var row UsageRecord
	st.insert = func(r UsageRecord) error { row = r; return nil }
	svc := newStubService(st, Options{Pools: &poolSourceStub{use: twoLines}})
	resp, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "lab", NonCritical: true, Continuation: true})
	if err != nil || cmd.Pools == nil || *cmd.Pools != (PoolsCmd{Line: "lab", Critical: false, Continuation: true, NoGrants: true}) {
		t.Fatalf("%v; store asked %+v", err, cmd.Pools)
	}
	if !resp.QuotaTight || resp.Drawn != (PoolSplit{Dedicated: 3, Shared: 2}) {
		t.Fatalf("answer %+v", resp)
	}
	if row.BusinessLine != "lab" || row.Drawn != (PoolSplit{Dedicated: 3, Shared: 2}) {
		t.Fatalf("ledger row %+v", row)
	}
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); err != nil || !cmd.Pools.Critical || cmd.Pools.Continuation {
		t.Fatalf("critical by default: %v, %+v", err, cmd.Pools)
	}
	// Grants without lines: the pools' path, no line.
	svc = newStubService(st, Options{Pools: &poolSourceStub{use: PoolUse{Grants: true}}})
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || cmd.Pools == nil || cmd.Pools.Line != "" || cmd.Pools.NoGrants {
		t.Fatalf("grants: %v, %+v", err, cmd.Pools)
	}
	// Neither: the plain path.
	svc = newStubService(st, Options{Pools: &poolSourceStub{}})
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || cmd.Pools != nil {
		t.Fatalf("plain: %v, %+v", err, cmd.Pools)
	}
}

// The pools settings cannot be read (MySQL down): CLOSED refuses with
// ErrUnavailable, OPEN fails open.
func TestApplyWithUnreadablePools(t *testing.T) {
	ctx := context.Background()
	src := &poolSourceStub{err: ErrUnavailable}
	st := &stubs{}
	if _, err := newStubService(st, Options{Pools: src}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, ErrUnavailable) || st.n("Apply") != 0 {
		t.Fatalf("CLOSED: %v", err)
	}
	st.getPolicy = func(string) (Policy, error) { p := testPolicy; p.FailMode = FailOpen; return p, nil }
	resp, err := newStubService(st, Options{Pools: src}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5})
	if err != nil || !resp.FailOpen || resp.Granted != 5 || st.n("Apply") != 0 {
		t.Fatalf("OPEN: %+v, %v", resp, err)
	}
	src.err = errors.New("bad settings row")
	if _, err := newStubService(st, Options{Pools: src}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("OPEN, not an outage: %v", err)
	}
}

// The balance store lost a resource's layout (it does not know the line):
// the layout is written again and the apply retried; seeding a pools'
// period rebuilds its pool counters too.
func TestApplyRepairsLostPools(t *testing.T) {
	ctx := context.Background()
	src := &poolSourceStub{use: twoLines}
	lost := true
	st := &stubs{apply: func(c ApplyCmd) (ApplyResult, error) {
		if lost {
			return ApplyResult{}, pools.ErrUnknownLine
		}
		return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
	}}
	src.relayoutErr = ErrUnavailable
	svc := newStubService(st, Options{Pools: src})
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); !errors.Is(err, pools.ErrUnknownLine) || src.relayouts != 1 {
		t.Fatalf("relayout failed: %v after %d relayouts", err, src.relayouts)
	}
	src.relayoutErr = nil
	st.apply = func(c ApplyCmd) (ApplyResult, error) {
		if src.relayouts < 2 {
			return ApplyResult{}, pools.ErrUnknownLine
		}
		return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
	}
	if resp, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); err != nil || resp.Granted != 5 {
		t.Fatalf("relayout: %+v, %v", resp, err)
	}
	// Without pools an unknown line is not repaired.
	st.apply = func(ApplyCmd) (ApplyResult, error) { return ApplyResult{}, pools.ErrUnknownLine }
	plain := &poolSourceStub{}
	if _, err := newStubService(st, Options{Pools: plain}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, pools.ErrUnknownLine) || plain.relayouts != 0 {
		t.Fatalf("plain: %v, %d relayouts", err, plain.relayouts)
	}
	if _, err := newStubService(st, Options{}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, pools.ErrUnknownLine) {
		t.Fatalf("no pools: %v", err)
	}

	// A new period: the balance is seeded, then, in the same seed step, the
	// pools' configuration and counters.
	seeded := false
	st = &stubs{
		apply: func(c ApplyCmd) (ApplyResult, error) {
			if !seeded {
				return ApplyResult{Outcome: ApplyNeedBalance}, nil
			}
			return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
		},
		balance: func(string, Period) (Balance, error) { return Balance{}, nil },
		seed: func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) {
			seeded = true
			return true, nil
		},
	}
	src = &poolSourceStub{use: twoLines}
	svc = newStubService(st, Options{Pools: src})
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); err != nil ||
		st.n("PoolTotals") != 1 || st.n("SeedPools") != 1 || src.relayouts != 1 {
		t.Fatalf("%v; %d pool totals, %d pool seeds, %d relayouts", err, st.n("PoolTotals"), st.n("SeedPools"), src.relayouts)
	}
	for name, c := range map[string]struct {
		src            *poolSourceStub
		totals, counts error
	}{
		"relayout": {src: &poolSourceStub{use: twoLines, relayoutErr: ErrUnavailable}},
		"totals":   {src: &poolSourceStub{use: twoLines}, totals: ErrUnavailable},
		"seed":     {src: &poolSourceStub{use: twoLines}, counts: ErrUnavailable},
	} {
		seeded = false
		st.poolTotalsErr, st.seedPoolsErr = c.totals, c.counts
		if _, err := newStubService(st, Options{Pools: c.src}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s failed: %v", name, err)
		}
	}
	st.poolTotalsErr, st.seedPoolsErr = nil, nil
	// A plain resource's seeding touches no pools.
	seeded = false
	src = &poolSourceStub{}
	before := st.n("SeedPools")
	if _, err := newStubService(st, Options{Pools: src}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || st.n("SeedPools") != before || src.relayouts != 0 {
		t.Fatalf("plain seeding: %v; %d pool seeds", err, st.n("SeedPools")-before)
	}
}

// A pools' refusal says which limit refused it; the plain EXHAUSTED of the
// store is the domain's own.
func TestRefusalReasons(t *testing.T) {
	for reason, want := range map[pools.Reason]RefusalReason{
		"": RefusedExhausted, pools.ReasonExhausted: RefusedExhausted, pools.ReasonWatermark: RefusedWatermark,
		pools.ReasonLineExhausted: RefusedLineExhausted, pools.ReasonPoolExhausted: RefusedPoolExhausted,
	} {
		st := &stubs{apply: func(ApplyCmd) (ApplyResult, error) {
			return ApplyResult{Outcome: ApplyExhausted, Reason: reason}, nil
		}}
		resp, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5})
		if err != nil || resp.Refusal == nil || resp.Refusal.Reason != want {
			t.Errorf("store reason %q: %+v, %v; want %q", reason, resp.Refusal, err, want)
		}
	}
}

// A split survives the trip to the model's form, and only a split with
// something besides the base is shown as "drawn".
func TestPoolSplits(t *testing.T) {
	s := PoolSplit{Base: 1, Dedicated: 2, Shared: 3, Buffer: 4, Grant: 5, Grants: "g1=2;g2=3"}
	back := s.Drawn()
	if back.Total() != 15 || len(back.Grants) != 2 || back.Grants[1] != (pools.GrantDraw{ID: "g2", Amount: 3}) ||
		pools.FormatGrants(back.Grants) != s.Grants {
		t.Fatalf("round trip %+v of %+v", back, s)
	}
	for _, c := range []struct {
		s    PoolSplit
		want bool
	}{{s, true}, {PoolSplit{Shared: 1}, true}, {PoolSplit{Grant: 1, Grants: "g=1"}, true}, {PoolSplit{Base: 9}, false}, {PoolSplit{}, false}} {
		if c.s.Pooled() != c.want {
			t.Errorf("%+v: Pooled %v, want %v", c.s, !c.want, c.want)
		}
	}
}

// PutPolicy refuses a limit the resource's lines do not fit before anything
// is stored, and lays the pools out again after a limit change of a
// resource with lines (none for one without).
func TestPutPolicyChecksAndRelayoutsThePools(t *testing.T) {
	ctx := context.Background()
	pol := Policy{ResourceName: "r", QuotaType: TypeCount, TotalLimit: 7}
	st := &stubs{putPolicy: func(p Policy) (Policy, bool, error) { return p, false, nil }}
	bad := &poolSourceStub{use: twoLines, limitErr: &ValidationError{Field: "totalLimit", Reason: "does not fit"}}
	if _, _, err := newStubService(st, Options{Pools: bad}).PutPolicy(ctx, pol); field(err) != "totalLimit" || st.n("PutPolicy") != 0 || st.n("SetLimit") != 0 {
		t.Fatalf("a limit the lines do not fit: %v; stored %d, set %d", err, st.n("PutPolicy"), st.n("SetLimit"))
	}
	lined, plain := &poolSourceStub{use: twoLines}, &poolSourceStub{}
	for _, src := range []*poolSourceStub{lined, plain} {
		if _, _, err := newStubService(st, Options{Pools: src}).PutPolicy(ctx, pol); err != nil {
			t.Fatal(err)
		}
	}
	if lined.relayouts != 1 || plain.relayouts != 0 {
		t.Fatalf("relayouts: with lines %d, without %d", lined.relayouts, plain.relayouts)
	}
}

// A grant on a business line answers what the line could still be granted
// (ApplyResult.LineRemaining); a pools' grant without a line, and a plain
// one, answer none (nil, not 0).
func TestApplyLineRemainingOnlyOnALine(t *testing.T) {
	ctx := context.Background()
	st := &stubs{apply: func(c ApplyCmd) (ApplyResult, error) {
		return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, Remaining: 90, LineRemaining: 7, PeriodStart: c.Period.Start}, nil
	}}
	resp, err := newStubService(st, Options{Pools: &poolSourceStub{use: twoLines}}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"})
	if err != nil || resp.LineRemaining == nil || *resp.LineRemaining != 7 || resp.Remaining != 90 {
		t.Fatalf("on a line: %+v (line remaining %v), %v; want 7", resp, resp.LineRemaining, err)
	}
	for name, src := range map[string]*poolSourceStub{"grants, no line": {use: PoolUse{Grants: true}}, "plain": {}} {
		resp, err := newStubService(st, Options{Pools: src}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5})
		if err != nil || resp.LineRemaining != nil {
			t.Errorf("%s: line remaining %v, %v; want none", name, resp.LineRemaining, err)
		}
	}
}
