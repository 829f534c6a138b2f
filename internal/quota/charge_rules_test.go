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
