package redisstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// charge.lua against chargeDecision, its Go reference model: random
// balances (past the limit too), amounts and needs; every outcome and the
// balance after it must agree.
func TestChargeScriptAgreesWithItsReferenceModel(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"redis", "cluster/pipelined", "miniredis"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, b)
			per := e.current(t)
			rng := rand.New(rand.NewPCG(7, 11))
			e.seed(t, per, 1000, quota.PeriodTotals{Charged: 0, Reserved: 50})
			seen := map[chargeCode]int{}
			for i := range 300 {
				before := e.balance(t, per)
				amount := rng.Int64N(300)
				need := []int64{-1, 0, amount, rng.Int64N(400)}[rng.IntN(4)]
				if i%50 == 49 {
					// Move the limit so that both sides of it are tried.
					if err := e.s.SetLimit(ctxT(t), e.res, 500+rng.Int64N(4000)); err != nil {
						t.Fatal(err)
					}
					before = e.balance(t, per)
				}
				wantCode, wantOverage := chargeDecision(before.Limit, before.Charged, before.Reserved, amount, need)
				seen[wantCode]++
				res, err := e.s.Charge(ctxT(t), quota.ChargeCmd{ResourceName: e.res, Amount: amount, Need: need, Period: per})
				if err != nil {
					t.Fatalf("charge %d need %d: %v", amount, need, err)
				}
				after := e.balance(t, per)
				switch wantCode {
				case chargeCharged:
					if res.Outcome != quota.ChargeCharged || res.Overage != wantOverage || after.Charged != before.Charged+amount ||
						res.Remaining != after.Remaining() || res.Limit != before.Limit {
						t.Fatalf("charge %d need %d on %+v: got %+v, balance after %+v; model: charged, overage %d", amount, need, before, res, after, wantOverage)
					}
				case chargeRefused:
					if res.Outcome != quota.ChargeRefused || after != before || res.Remaining != before.Remaining() {
						t.Fatalf("charge %d need %d on %+v: got %+v, balance after %+v; model: refused", amount, need, before, res, after)
					}
				}
			}
			if seen[chargeCharged] == 0 || seen[chargeRefused] == 0 {
				t.Fatalf("the walk did not try both outcomes: %v", seen)
			}
		})
	}
}

func TestChargeNeedsTheBalanceAndTheRightPeriodAndUnchargeGivesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "miniredis")
	per := e.current(t)
	res, err := e.s.Charge(ctxT(t), quota.ChargeCmd{ResourceName: e.res, Amount: 1, Need: 1, Period: per})
	if err != nil || res.Outcome != quota.ChargeNeedBalance {
		t.Fatalf("unseeded: %+v %v, want need balance", res, err)
	}
	e.seed(t, per, 10, quota.PeriodTotals{})
	past := quota.Period{Start: per.Start.Add(-48 * time.Hour), End: per.Start.Add(-24 * time.Hour)}
	if res, err := e.s.Charge(ctxT(t), quota.ChargeCmd{ResourceName: e.res, Amount: 1, Need: 1, Period: past}); err != nil || res.Outcome != quota.ChargeWrongPeriod {
		t.Fatalf("past period: %+v %v, want wrong period", res, err)
	}
	if res, err := e.s.Charge(ctxT(t), quota.ChargeCmd{ResourceName: e.res, Amount: 4, Need: 4, Period: per}); err != nil || res.Outcome != quota.ChargeCharged || res.Remaining != 6 {
		t.Fatalf("charge: %+v %v", res, err)
	}
	if err := e.s.Uncharge(ctxT(t), e.res, per, 4); err != nil {
		t.Fatal(err)
	}
	if b := e.balance(t, per); b.Charged != 0 {
		t.Fatalf("after uncharge: %+v", b)
	}
	if err := e.s.Uncharge(ctxT(t), e.res, past, 4); err != nil {
		t.Fatal(err) // a period without a balance: nothing to give back
	}
}
