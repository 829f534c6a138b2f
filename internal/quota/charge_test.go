package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// fakeCharges is an in-memory ChargeStore and ChargeLedger: a limit and a
// charged total per resource, rows per request; fail* make a call fail.
type fakeCharges struct {
	mu         sync.Mutex
	limit      map[string]int64
	charged    map[string]int64
	rows       [][]UsageRecord
	failCharge map[string]error
	failLedger error
}

func newFakeCharges(limits map[string]int64) *fakeCharges {
	return &fakeCharges{limit: limits, charged: map[string]int64{}, failCharge: map[string]error{}}
}

func (f *fakeCharges) Charge(_ context.Context, c ChargeCmd) (ChargeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failCharge[c.ResourceName]; err != nil {
		return ChargeResult{}, err
	}
	rem := f.limit[c.ResourceName] - f.charged[c.ResourceName]
	if (c.Need == 0 && rem <= 0) || (c.Need > 0 && rem < c.Need) {
		return ChargeResult{Outcome: ChargeRefused, Limit: f.limit[c.ResourceName], Remaining: rem}, nil
	}
	f.charged[c.ResourceName] += c.Amount
	return ChargeResult{Outcome: ChargeCharged, Limit: f.limit[c.ResourceName], Remaining: rem - c.Amount,
		Overage: max(0, c.Amount-max(rem, 0))}, nil
}

func (f *fakeCharges) Uncharge(_ context.Context, r string, _ Period, amount int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charged[r] -= amount
	return nil
}

func (f *fakeCharges) InsertCharges(_ context.Context, recs []UsageRecord) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failLedger != nil {
		return f.failLedger
	}
	f.rows = append(f.rows, recs)
	return nil
}

func chargeService(f *fakeCharges, mode FailMode) (*Service, *stubs) {
	st := &stubs{
		getPolicy: func(r string) (Policy, error) {
			p := testPolicy
			p.ResourceName, p.FailMode = r, mode
			return p, nil
		},
		session: func(string) (UsageRecord, error) { return UsageRecord{}, ErrSessionNotFound },
	}
	return newStubService(st, Options{Charges: ChargeStores{Balances: f, Ledger: f}}), st
}

// A refusal gives back what was charged before it: nothing stays charged
// and no ledger row is written.
func TestChargeIsAllOrNothing(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10, "b": 1})
	svc, _ := chargeService(f, FailClosed)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 2, false}, {"b", 2, false}}})
	if err != nil || !resp.Refused || !resp.Items[1].Exceeded || resp.Items[0].Exceeded || resp.Items[0].Remaining != 10 {
		t.Fatalf("refused request: %+v %v", resp, err)
	}
	if f.charged["a"] != 0 || f.charged["b"] != 0 || len(f.rows) != 0 {
		t.Fatalf("after a refusal: charged %v, rows %v", f.charged, f.rows)
	}
	resp, err = svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 2, false}, {"b", 5, true}}, ClientID: "c"})
	if err != nil || resp.Refused || f.charged["a"] != 2 || f.charged["b"] != 5 || !resp.Items[1].Exceeded || resp.Items[1].Overage != 4 {
		t.Fatalf("a forced charge past the limit: %+v %v, charged %v", resp, err, f.charged)
	}
	if len(f.rows) != 1 || len(f.rows[0]) != 2 || f.rows[0][1].OverageAmount != 4 || f.rows[0][0].ClientID != "c" || f.rows[0][0].Status != StatusFinished {
		t.Fatalf("ledger rows %+v", f.rows)
	}
}

// A ledger that cannot be written gives the charges back: a CLOSED policy
// fails, an OPEN one fails open (not recorded: the ledger is down).
func TestChargeWhoseLedgerFailsIsGivenBack(t *testing.T) {
	for _, mode := range []FailMode{FailClosed, FailOpen} {
		f := newFakeCharges(map[string]int64{"a": 10})
		f.failLedger = fmt.Errorf("insert: %w", ErrUnavailable)
		svc, _ := chargeService(f, mode)
		resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 3, false}}})
		if f.charged["a"] != 0 {
			t.Fatalf("%s: charged %d after the ledger failed", mode, f.charged["a"])
		}
		switch mode {
		case FailClosed:
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("CLOSED: %+v %v, want unavailable", resp, err)
			}
		default:
			if err != nil || !resp.FailOpen || resp.FailOpenRecorded || resp.Items[0].Remaining != -1 {
				t.Fatalf("OPEN: %+v %v, want fail-open, not recorded", resp, err)
			}
		}
	}
}

// Redis down: OPEN policies fail open with the charge in the ledger; a
// request with one CLOSED policy fails, giving back what was charged.
func TestChargeWithRedisDownFollowsTheFailModes(t *testing.T) {
	f := newFakeCharges(map[string]int64{"a": 10, "b": 10})
	f.failCharge["b"] = fmt.Errorf("redis: %w", ErrUnavailable)
	svc, _ := chargeService(f, FailOpen)
	resp, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 3, false}, {"b", 4, false}}})
	if err != nil || !resp.FailOpen || !resp.FailOpenRecorded || f.charged["a"] != 0 {
		t.Fatalf("OPEN: %+v %v, charged %v", resp, err, f.charged)
	}
	if len(f.rows) != 1 || len(f.rows[0]) != 2 || f.rows[0][0].ChargedAmount+f.rows[0][1].ChargedAmount != 7 {
		t.Fatalf("fail-open ledger rows %+v", f.rows)
	}
	svc, _ = chargeService(f, FailClosed)
	if _, err := svc.Charge(context.Background(), ChargeRequest{Items: []ChargeItem{{"a", 3, false}, {"b", 4, false}}}); !errors.Is(err, ErrUnavailable) || f.charged["a"] != 0 {
		t.Fatalf("CLOSED: %v, charged %v", err, f.charged)
	}
}

func TestChargeValidatesItsInput(t *testing.T) {
	svc, _ := chargeService(newFakeCharges(nil), FailClosed)
	many := make([]ChargeItem, MaxChargeItems+1)
	for i := range many {
		many[i] = ChargeItem{ResourceName: "a", Amount: 1}
	}
	for name, req := range map[string]ChargeRequest{
		"no items":      {},
		"too many":      {Items: many},
		"bad name":      {Items: []ChargeItem{{"A B", 1, false}}},
		"negative":      {Items: []ChargeItem{{"a", -1, false}}},
		"past 2^53":     {Items: []ChargeItem{{"a", MaxAmount + 1, false}}},
		"sum past 2^53": {Items: []ChargeItem{{"a", MaxAmount, false}, {"a", 1, true}}},
		"bad client":    {Items: []ChargeItem{{"a", 1, false}}, ClientID: "a b"},
	} {
		var ve *ValidationError
		if _, err := svc.Charge(context.Background(), req); !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a validation error", name, err)
		}
	}
}
