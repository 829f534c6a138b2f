package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// ctxCharges is fakeCharges whose Uncharge fails on a context that is done,
// as a real store's call does.
type ctxCharges struct {
	*fakeCharges
	onRefuse func() // called when Charge refuses (the client goes away)
}

func (f ctxCharges) Charge(ctx context.Context, c ChargeCmd) (ChargeResult, error) {
	res, err := f.fakeCharges.Charge(ctx, c)
	if err == nil && res.Outcome == ChargeRefused && f.onRefuse != nil {
		f.onRefuse()
	}
	return res, err
}

func (f ctxCharges) Uncharge(ctx context.Context, r string, p Period, amount int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.fakeCharges.Uncharge(ctx, r, p, amount)
}

// The undo of a refused request runs on a deadline of its own: a client
// that went away at the refusal (its context cancelled) still gets what
// was charged before it given back.
func TestChargeUndoOutlivesTheRequestsContext(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10, "b": 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cf := ctxCharges{fakeCharges: f, onRefuse: cancel}
	svc, _ := chargeService(f, FailClosed)
	svc.opt.Charges = ChargeStores{Balances: cf, Ledger: f}
	resp, err := svc.Charge(ctx, ChargeRequest{Items: []ChargeItem{{"a", 4, false}, {"b", 2, false}}})
	if err != nil || !resp.Refused {
		t.Fatalf("%+v %v, want refused", resp, err)
	}
	if f.charged["a"] != 0 {
		t.Fatalf("a still charged %d after the refusal", f.charged["a"])
	}
}

// Bounds: 64 items are allowed (65 are not, TestChargeValidatesItsInput);
// a resource's amounts may add up to 2^53−1 exactly.
func TestChargeAcceptsItsBounds(t *testing.T) {
	many := make([]ChargeItem, MaxChargeItems)
	for i := range many {
		many[i] = ChargeItem{ResourceName: "a", Amount: 1}
	}
	f := newFakeCharges(map[string]int64{"a": 100, "b": MaxAmount})
	svc, _ := chargeService(f, FailClosed)
	if resp, err := svc.Charge(context.Background(), ChargeRequest{Items: many}); err != nil || resp.Refused || f.charged["a"] != MaxChargeItems {
		t.Fatalf("%d items: %+v %v, charged %v", MaxChargeItems, resp, err, f.charged)
	}
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"b", MaxAmount - 1, false}, {"b", 1, true}}})
	if err != nil || resp.Refused || f.charged["b"] != MaxAmount {
		t.Fatalf("amounts adding up to 2^53-1: %+v %v, charged %v", resp, err, f.charged)
	}
}

// Items of one resource are charged together: what must fit is the sum of
// its non-Force amounts, the Force ones are charged on top, and the part
// past the limit is the Force item's overage (the admitted item has none).
func TestChargeForceItemsAreChargedOnTopOfWhatMustFit(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10})
	svc, _ := chargeService(f, FailClosed)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 8, false}, {"a", 5, true}}})
	if err != nil || resp.Refused || f.charged["a"] != 13 {
		t.Fatalf("8 to fit and 5 forced of 10: %+v %v, charged %v", resp, err, f.charged)
	}
	if it := resp.Items; it[0].Overage != 0 || it[1].Overage != 3 || it[0].Remaining != -3 || !it[0].Checked {
		t.Fatalf("items %+v, want the overage 3 on the forced one and −3 remaining", it)
	}
	if len(f.rows) != 1 || len(f.rows[0]) != 1 || f.rows[0][0].ChargedAmount != 13 || f.rows[0][0].OverageAmount != 3 {
		t.Fatalf("ledger %+v, want one row of 13 with 3 overage", f.rows)
	}
	// What must fit does not: nothing is charged, the forced item included.
	f = newFakeCharges(map[string]int64{"a": 10})
	svc, _ = chargeService(f, FailClosed)
	resp, err = svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 11, false}, {"a", 1, true}}})
	if err != nil || !resp.Refused || f.charged["a"] != 0 || !resp.Items[0].Exceeded || resp.Items[0].Remaining != 10 {
		t.Fatalf("11 to fit of 10: %+v %v, charged %v", resp, err, f.charged)
	}
}

// Exceeded says the item did not fit: an amount that uses exactly what is
// left fits; a check (amount 0) fits while something is left; a Force
// check of an exhausted resource is charged (nothing) but Exceeded.
func TestChargeExceededAtTheEdges(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10, "z": 0})
	svc, _ := chargeService(f, FailClosed)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 10, false}}})
	if err != nil || resp.Refused || resp.Items[0].Exceeded || resp.Items[0].Remaining != 0 {
		t.Fatalf("exactly what is left: %+v %v", resp, err)
	}
	resp, err = svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"z", 0, true}}})
	if err != nil || resp.Refused || !resp.Items[0].Exceeded || !resp.Items[0].Checked {
		t.Fatalf("a forced check with nothing left: %+v %v", resp, err)
	}
	f.limit["y"] = 1
	resp, err = svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"y", 0, true}}})
	if err != nil || resp.Items[0].Exceeded {
		t.Fatalf("a forced check with 1 left: %+v %v", resp, err)
	}
	// A check charges nothing and writes no ledger row.
	rows := len(f.rows)
	resp, err = svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"y", 0, false}}})
	if err != nil || resp.Refused || resp.Items[0].Exceeded || len(f.rows) != rows {
		t.Fatalf("a check: %+v %v, rows %d → %d", resp, err, rows, len(f.rows))
	}
}

// Each item says its period and the length of a full period (the next
// one's): testPolicy's periods are whole days.
func TestChargeGivesThePeriodAndItsLength(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10})
	svc, _ := chargeService(f, FailClosed)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 1, false}}})
	if err != nil {
		t.Fatal(err)
	}
	it := resp.Items[0]
	if !it.Period.Start.Equal(testEpoch) || !it.Period.End.Equal(testEpoch.Add(24*time.Hour)) || it.PeriodLength != 24*time.Hour {
		t.Fatalf("period %v … %v, length %v; want the day from %v, 24h", it.Period.Start, it.Period.End, it.PeriodLength, testEpoch)
	}
}

// A ledger write whose outcome is unknown (the connection died after the
// commit) is read back: the row is there, so the charge stands.
func TestChargeLedgerOutcomeUnknownIsReadBack(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10})
	f.failLedger = fmt.Errorf("commit: %w", ErrUnavailable)
	svc, st := chargeService(f, FailClosed)
	st.session = func(id string) (UsageRecord, error) {
		return UsageRecord{SessionID: id, ResourceName: "a", Status: StatusFinished}, nil
	}
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 3, false}}})
	if err != nil || resp.Refused || f.charged["a"] != 3 {
		t.Fatalf("%+v %v, charged %v; want the charge kept", resp, err, f.charged)
	}
	// The row read back is not a finished one: the charge is given back.
	st.session = func(id string) (UsageRecord, error) {
		return UsageRecord{SessionID: id, ResourceName: "a", Status: StatusUsing}, nil
	}
	if _, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 3, false}}}); !errors.Is(err, ErrUnavailable) || f.charged["a"] != 3 {
		t.Fatalf("%v, charged %v; want unavailable and the second charge given back", err, f.charged)
	}
}

// Failing open with nothing to record (a check) counts as recorded.
func TestChargeFailOpenCheckIsRecorded(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10})
	f.failCharge["a"] = fmt.Errorf("redis: %w", ErrUnavailable)
	f.failLedger = fmt.Errorf("mysql: %w", ErrUnavailable)
	svc, _ := chargeService(f, FailOpen)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 0, false}}})
	if err != nil || !resp.FailOpen || !resp.FailOpenRecorded || resp.Items[0].Remaining != -1 || resp.Items[0].Limit != testPolicy.TotalLimit {
		t.Fatalf("%+v %v", resp, err)
	}
}

// A charge draws from the resource's own balance only: a resource with
// business lines or temporary grants is refused (a validation error,
// nothing charged); pools that cannot be read fail the charge.
func TestChargeRefusesResourcesWithLinesOrGrants(t *testing.T) {
	for _, c := range []struct {
		name    string
		src     *poolStub
		invalid bool
		err     bool
	}{
		{"lines", &poolStub{lines: twoLines}, true, true},
		{"grants", &poolStub{grants: oneGrant}, true, true},
		{"pools unreadable", &poolStub{err: fmt.Errorf("pools: %w", ErrUnavailable)}, false, true},
		{"plain", &poolStub{}, false, false},
	} {
		f := newFakeCharges(map[string]int64{"a": 10})
		st := &stubs{session: func(string) (UsageRecord, error) { return UsageRecord{}, ErrSessionNotFound }}
		svc := newStubService(st, pooled(st, c.src, Options{Charges: ChargeStores{Balances: f, Ledger: f}}))
		resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 3, false}}})
		var ve *ValidationError
		if (err != nil) != c.err || errors.As(err, &ve) != c.invalid {
			t.Errorf("%s: %+v %v; want error %v, validation error %v", c.name, resp, err, c.err, c.invalid)
		}
		if want := map[bool]int64{true: 0, false: 3}[c.err]; f.charged["a"] != want {
			t.Errorf("%s: charged %d, want %d", c.name, f.charged["a"], want)
		}
	}
}

// periodCharges answers WrongPeriod (with the store's time tomorrow) to a
// charge of another period than tomorrow, NeedBalance until the stubs have
// seeded tomorrow, then charges.
type periodCharges struct {
	tomorrow Period
	seeded   *Period
	periods  []Period
	first    []bool
	outcome  ChargeOutcome // when set, always answered
}

func (p *periodCharges) Charge(_ context.Context, c ChargeCmd) (ChargeResult, error) {
	p.periods = append(p.periods, c.Period)
	p.first = append(p.first, c.FirstPeriod)
	switch {
	case p.outcome != 0:
		return ChargeResult{Outcome: p.outcome, Now: c.Period.End.Add(time.Hour)}, nil
	case c.Period != p.tomorrow:
		return ChargeResult{Outcome: ChargeWrongPeriod, Now: p.tomorrow.Start.Add(time.Minute)}, nil
	case *p.seeded != p.tomorrow:
		return ChargeResult{Outcome: ChargeNeedBalance}, nil
	}
	return ChargeResult{Outcome: ChargeCharged, Limit: 100, Remaining: 100 - c.Amount}, nil
}

func (p *periodCharges) Uncharge(context.Context, string, Period, int64) error { return nil }

// As apply does, a charge follows the store's clock: a wrong period is
// retried in the period of the store's time, a missing balance is seeded
// and retried; a seeding that fails, an unknown outcome and stores that
// keep changing fail the charge.
func TestChargeFollowsTheStoresPeriodAndSeeds(t *testing.T) {
	tomorrow := Period{Start: today.End, End: today.End.Add(24 * time.Hour)}
	var seeded Period
	st := &stubs{
		session: func(string) (UsageRecord, error) { return UsageRecord{}, ErrSessionNotFound },
		balance: func(string, Period) (Balance, error) { return Balance{}, nil },
		seed: func(_ string, per Period, _ int64, _ PeriodTotals, _ []UsageRecord) (bool, error) {
			seeded = per
			return true, nil
		},
	}
	pc := &periodCharges{tomorrow: tomorrow, seeded: &seeded}
	f := newFakeCharges(nil)
	svc := newStubService(st, Options{Charges: ChargeStores{Balances: pc, Ledger: f}})
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"r", 5, false}}})
	if err != nil || resp.Refused || len(pc.periods) != 3 || pc.periods[0] != today || st.n("Seed") != 1 || seeded != tomorrow {
		t.Fatalf("%+v %v; periods %v, seeds %d", resp, err, pc.periods, st.n("Seed"))
	}
	if it := resp.Items[0]; it.Period != tomorrow || it.Remaining != 95 || !pc.first[0] || pc.first[1] || pc.first[2] {
		t.Fatalf("item %+v, first-period flags %v; want tomorrow (not the first period), 95 left", it, pc.first)
	}
	if len(f.rows) != 1 || !f.rows[0][0].PeriodStart.Equal(tomorrow.Start) {
		t.Fatalf("ledger %+v, want a row of tomorrow", f.rows)
	}

	st.seed = func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return false, ErrUnavailable }
	seeded = Period{}
	pc.periods = nil
	if _, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"r", 5, false}}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("seeding failed: %v", err)
	}
	pc.outcome = 99
	if _, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"r", 5, false}}}); err == nil {
		t.Fatal("an unknown outcome was accepted")
	}
	pc.outcome, pc.periods = ChargeWrongPeriod, nil
	if _, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"r", 5, false}}}); !errors.Is(err, ErrUnavailable) || len(pc.periods) != maxAttempts {
		t.Fatalf("stores that keep changing: %v after %d attempts", err, len(pc.periods))
	}
	// A period the scheduler cannot compute fails the charge.
	svc = NewService(st, st, st, badSched{}, Options{Now: func() time.Time { return testEpoch }, Charges: ChargeStores{Balances: pc, Ledger: f}})
	if _, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"r", 5, false}}}); !errors.Is(err, errNoPeriod) {
		t.Fatalf("no period: %v", err)
	}
}

// Failing open, each item names the period it would have been charged to
// (the policy's current one); in a refused request the resources not
// reached are not Checked and answer the policy's limit and −1 remaining.
func TestChargeItemsOfFailOpenAndOfResourcesNotReached(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10})
	f.failCharge["a"] = fmt.Errorf("redis: %w", ErrUnavailable)
	svc, _ := chargeService(f, FailOpen)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 1, false}}})
	if err != nil || !resp.FailOpen || resp.Items[0].Period != today {
		t.Fatalf("%+v %v; want fail-open in today's period %v", resp, err, today)
	}
	if len(f.rows) != 1 || !f.rows[0][0].PeriodStart.Equal(today.Start) {
		t.Fatalf("fail-open ledger rows %+v, want today's", f.rows)
	}

	f = newFakeCharges(map[string]int64{"a": 10, "b": 1, "c": 10})
	svc, _ = chargeService(f, FailClosed)
	resp, err = svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 1, false}, {"b", 2, false}, {"c", 1, false}}})
	if err != nil || !resp.Refused {
		t.Fatalf("%+v %v", resp, err)
	}
	if c := resp.Items[2]; c.Checked || c.Exceeded || c.Limit != testPolicy.TotalLimit || c.Remaining != -1 {
		t.Fatalf("item not reached: %+v", c)
	}
	if a := resp.Items[0]; !a.Checked || a.Remaining != 10 {
		t.Fatalf("item given back: %+v", a)
	}
}
