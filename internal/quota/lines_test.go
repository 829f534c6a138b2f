package quota

import (
	"context"
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

// poolStub is the pools' configuration in process (PoolConfig): its lines
// and grants (the default pool settings), or err on every read; what the
// ledger's rows drew is its stubs' (stubs.PoolTotals). Each read is counted
// by the stubs under its method name.
type poolStub struct {
	*stubs
	lines  []pools.LineSpec
	grants []pools.GrantRecord
	err    error
	events []pools.Event // journalled
	absent bool          // UpdatePolicyLocked finds no policy
}

func (p *poolStub) Lines(ctx context.Context, _ string) ([]pools.LineSpec, error) {
	p.count("Lines")
	return p.lines, p.err
}

func (p *poolStub) PoolSettings(ctx context.Context, _ string) (pools.Settings, bool, error) {
	p.count("PoolSettings")
	return pools.DefaultSettings(), false, p.err
}

func (p *poolStub) Grants(ctx context.Context, _ string, _ int64) ([]pools.GrantRecord, error) {
	p.count("Grants")
	return p.grants, p.err
}

func (p *poolStub) GrantsHeld(ctx context.Context, _ string, _ int64) (pools.GrantUse, error) {
	p.count("GrantsHeld")
	return pools.GrantUse{}, p.err
}

func (p *poolStub) PoolMoves(ctx context.Context, _ string) (pools.Moves, error) {
	p.count("PoolMoves")
	return pools.Moves{}, p.err
}

// UpdatePolicyLocked checks p against the stub's lines and grants, then
// stores it through the stubs' PutPolicy.
func (p *poolStub) UpdatePolicyLocked(ctx context.Context, pol Policy, _ int64, check func(pools.State) error) (Policy, bool, error) {
	p.count("UpdatePolicyLocked")
	if p.err != nil || p.absent {
		return Policy{}, !p.absent, p.err
	}
	if err := check(pools.State{Settings: pools.DefaultSettings(), Lines: p.lines, Grants: p.grants}); err != nil {
		return Policy{}, true, err
	}
	stored, _, err := p.PutPolicy(ctx, pol)
	return stored, true, err
}

func (p *poolStub) RecordPoolEvents(ctx context.Context, _ string, evs []pools.Event) error {
	p.count("RecordPoolEvents")
	if p.err == nil {
		p.events = append(p.events, evs...)
	}
	return p.err
}

// TestWritePoolLayoutJournalsTheBufferItCuts: the lent buffer a layout
// cut back is journalled as RETURN events, one per cut; a layout that cut
// nothing journals nothing; a journal that cannot be written is the
// answer's error (the cut itself stays in the store).
func TestWritePoolLayoutJournalsTheBufferItCuts(t *testing.T) {
	ctx := context.Background()
	st := &stubs{}
	p := &poolStub{}
	svc := newStubService(st, pooled(st, p, Options{}))
	lay := pools.Layout{Limit: 100, Buffer: 5, Lines: []pools.LineLayout{{Name: "a"}}}
	if err := svc.WritePoolLayout(ctx, "r", lay); err != nil || st.n("RecordPoolEvents") != 0 {
		t.Fatalf("no cut: %v, %d journal writes", err, st.n("RecordPoolEvents"))
	}
	st.poolLayoutCuts = []pools.Cut{{Line: "", Amount: 2}, {Line: "a", Amount: 7}}
	if err := svc.WritePoolLayout(ctx, "r", lay); err != nil || len(p.events) != 2 ||
		p.events[0].Kind != pools.ReturnKind || p.events[0].Line != "" || p.events[0].Amount != 2 ||
		p.events[1].Line != "a" || p.events[1].Amount != 7 || p.events[1].Reason != pools.CutReason {
		t.Fatalf("cuts: %v, journalled %+v", err, p.events)
	}
	p.err = ErrUnavailable
	if err := svc.WritePoolLayout(ctx, "r", lay); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("journal down: %v, want ErrUnavailable", err)
	}
}

// pooled is opt with the pools' stores: p's configuration (p.stubs set to
// st), st's pool counters.
func pooled(st *stubs, p *poolStub, opt Options) Options {
	p.stubs = st
	opt.Pools = PoolStores{Config: p, Balances: st}
	return opt
}

// twoLines are two business lines of the default settings; oneGrant is a
// temporary grant in force from the epoch on.
var (
	twoLines = []pools.LineSpec{{Name: "chat", Tier: pools.TierCore, Weight: 1}, {Name: "lab", Tier: pools.TierExplore, Weight: 1}}
	oneGrant = []pools.GrantRecord{{Grant: pools.Grant{ID: "g1", Amount: 10, ExpiresMs: pools.MaxAmount}, Kind: pools.KindGrant}}
)

// A resource with business lines requires one of its lines; one without
// refuses any; the store is told the line, whether the call is critical
// and whether it continues running work.
func TestApplyBusinessLineRules(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		pools poolStub
		line  string
		field string
	}{
		{"line required", poolStub{lines: twoLines}, "", "businessLine"},
		{"no lines", poolStub{}, "chat", "businessLine"},
		{"no lines, grants", poolStub{grants: oneGrant}, "chat", "businessLine"},
		{"not a line", poolStub{lines: twoLines}, "ads", "businessLine"},
	} {
		st := &stubs{}
		svc := newStubService(st, pooled(st, &c.pools, Options{}))
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
	svc := newStubService(st, pooled(st, &poolStub{lines: twoLines}, Options{}))
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
	svc = newStubService(st, pooled(st, &poolStub{grants: oneGrant}, Options{}))
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || cmd.Pools == nil || cmd.Pools.Line != "" || cmd.Pools.NoGrants {
		t.Fatalf("grants: %v, %+v", err, cmd.Pools)
	}
	// Neither: the plain path.
	svc = newStubService(st, pooled(st, &poolStub{}, Options{}))
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || cmd.Pools != nil {
		t.Fatalf("plain: %v, %+v", err, cmd.Pools)
	}
}

// The pools settings cannot be read (MySQL down): CLOSED refuses with
// ErrUnavailable, OPEN fails open.
func TestApplyWithUnreadablePools(t *testing.T) {
	ctx := context.Background()
	src := &poolStub{err: ErrUnavailable}
	st := &stubs{}
	if _, err := newStubService(st, pooled(st, src, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, ErrUnavailable) || st.n("Apply") != 0 {
		t.Fatalf("CLOSED: %v", err)
	}
	st.getPolicy = func(string) (Policy, error) { p := testPolicy; p.FailMode = FailOpen; return p, nil }
	resp, err := newStubService(st, pooled(st, src, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5})
	if err != nil || !resp.FailOpen || resp.Granted != 5 || st.n("Apply") != 0 {
		t.Fatalf("OPEN: %+v, %v", resp, err)
	}
	src.err = errors.New("bad settings row")
	if _, err := newStubService(st, pooled(st, src, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("OPEN, not an outage: %v", err)
	}
}

// The balance store lost a resource's layout (it does not know the line):
// the layout is written again and the apply retried; seeding a pools'
// period rebuilds its layout, grants and pool counters too, in the seed
// step, from the stores (nothing outside quota is called).
func TestApplyRepairsLostPools(t *testing.T) {
	ctx := context.Background()
	lost := true
	st := &stubs{apply: func(c ApplyCmd) (ApplyResult, error) {
		if lost {
			return ApplyResult{}, pools.ErrUnknownLine
		}
		return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
	}}
	st.poolLayoutErr = ErrUnavailable
	svc := newStubService(st, pooled(st, &poolStub{lines: twoLines}, Options{}))
	// The layout cannot be written: a backend failure, answered as one.
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); !errors.Is(err, ErrUnavailable) || st.n("SetPoolLayout") != 1 {
		t.Fatalf("relayout failed: %v after %d layouts written", err, st.n("SetPoolLayout"))
	}
	st.poolLayoutErr = nil
	st.apply = func(c ApplyCmd) (ApplyResult, error) {
		if st.n("SetPoolLayout") < 2 {
			return ApplyResult{}, pools.ErrUnknownLine
		}
		return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
	}
	if resp, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); err != nil || resp.Granted != 5 {
		t.Fatalf("relayout: %+v, %v", resp, err)
	}
	if st.n("RestoreGrants") != 1 {
		t.Fatalf("relayout: %d grant restores; want the grants back", st.n("RestoreGrants"))
	}
	// Without pools an unknown line is not repaired.
	st = &stubs{apply: func(ApplyCmd) (ApplyResult, error) { return ApplyResult{}, pools.ErrUnknownLine }}
	if _, err := newStubService(st, pooled(st, &poolStub{}, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, pools.ErrUnknownLine) || st.n("SetPoolLayout") != 0 {
		t.Fatalf("plain: %v, %d layouts written", err, st.n("SetPoolLayout"))
	}
	if _, err := newStubService(st, Options{}).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, pools.ErrUnknownLine) {
		t.Fatalf("no pools: %v", err)
	}

	// A new period: the balance is seeded, then, in the same seed step, the
	// pools' layout, grants and counters.
	seeded := false
	newStubs := func() *stubs {
		return &stubs{
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
	}
	st = newStubs()
	if _, err := newStubService(st, pooled(st, &poolStub{lines: twoLines}, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); err != nil ||
		st.n("PoolTotals") != 1 || st.n("SeedPools") != 1 || st.n("SetPoolLayout") != 1 || st.n("RestoreGrants") != 1 {
		t.Fatalf("%v; %d pool totals, %d pool seeds, %d layouts, %d grant restores", err, st.n("PoolTotals"), st.n("SeedPools"), st.n("SetPoolLayout"), st.n("RestoreGrants"))
	}
	for name, c := range map[string]struct {
		layout, totals, counts error
	}{
		"relayout": {layout: ErrUnavailable},
		"totals":   {totals: ErrUnavailable},
		"seed":     {counts: ErrUnavailable},
	} {
		seeded = false
		st = newStubs()
		st.poolLayoutErr, st.poolTotalsErr, st.seedPoolsErr = c.layout, c.totals, c.counts
		if _, err := newStubService(st, pooled(st, &poolStub{lines: twoLines}, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s failed: %v", name, err)
		}
	}
	// A plain resource's seeding touches no pools.
	seeded = false
	st = newStubs()
	if _, err := newStubService(st, pooled(st, &poolStub{}, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || st.n("SeedPools") != 0 || st.n("SetPoolLayout") != 0 {
		t.Fatalf("plain seeding: %v; %d pool seeds, %d layouts", err, st.n("SeedPools"), st.n("SetPoolLayout"))
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
	newStubs := func() *stubs { return &stubs{putPolicy: func(p Policy) (Policy, bool, error) { return p, false, nil }} }
	st := &stubs{}
	tooBig := []pools.LineSpec{{Name: "chat", Tier: pools.TierCore, Dedicated: 100}}
	if _, _, err := newStubService(st, pooled(st, &poolStub{lines: tooBig}, Options{})).PutPolicy(ctx, pol); field(err) != "totalLimit" || st.n("PutPolicy") != 0 || st.n("SetLimit") != 0 {
		t.Fatalf("a limit the lines do not fit: %v; stored %d, set %d", err, st.n("PutPolicy"), st.n("SetLimit"))
	}
	st = newStubs()
	if _, _, err := newStubService(st, pooled(st, &poolStub{lines: twoLines, err: ErrUnavailable}, Options{})).PutPolicy(ctx, pol); !errors.Is(err, ErrUnavailable) || st.n("PutPolicy") != 0 {
		t.Fatalf("lines unreadable: %v; stored %d", err, st.n("PutPolicy"))
	}
	for lines, want := range map[int]int{2: 1, 0: 0} {
		st = newStubs()
		if _, _, err := newStubService(st, pooled(st, &poolStub{lines: twoLines[:lines]}, Options{})).PutPolicy(ctx, pol); err != nil {
			t.Fatal(err)
		}
		if st.n("SetPoolLayout") != want {
			t.Fatalf("%d lines: %d layouts written, want %d", lines, st.n("SetPoolLayout"), want)
		}
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
	resp, err := newStubService(st, pooled(st, &poolStub{lines: twoLines}, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "chat"})
	if err != nil || resp.LineRemaining == nil || *resp.LineRemaining != 7 || resp.Remaining != 90 {
		t.Fatalf("on a line: %+v (line remaining %v), %v; want 7", resp, resp.LineRemaining, err)
	}
	for name, src := range map[string]*poolStub{"grants, no line": {grants: oneGrant}, "plain": {}} {
		resp, err := newStubService(st, pooled(st, src, Options{})).Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5})
		if err != nil || resp.LineRemaining != nil {
			t.Errorf("%s: line remaining %v, %v; want none", name, resp.LineRemaining, err)
		}
	}
}
