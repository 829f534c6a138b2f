package redisstore

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/quota"
)

var (
	chargeScript   = load("charge.lua")
	unchargeScript = load("uncharge.lua")
)

var _ quota.ChargeStore = (*Store)(nil)

// chargeCode is charge.lua's first reply element.
type chargeCode int64

const (
	chargeCharged    chargeCode = 1
	chargeRefused    chargeCode = 3
	chargeWrongPer   chargeCode = 4
	chargeNeedBal    chargeCode = 5
	chargeOverflowed chargeCode = 7
)

// chargeDecision is the Go reference model of charge.lua's decision, held
// against it by a randomized test: whether an amount with need (see
// quota.ChargeCmd.Need) is charged on a balance of limit, charged and
// reserved, and the part of it past the limit.
func chargeDecision(limit, charged, reserved, amount, need int64) (code chargeCode, overage int64) {
	remaining := limit - charged - reserved
	if (need == 0 && remaining <= 0) || (need > 0 && remaining < need) {
		return chargeRefused, 0
	}
	if float64(charged)+float64(amount) > 9.0e18 {
		return chargeOverflowed, 0
	}
	return chargeCharged, overageOf(remaining, amount)
}

// overageOf is the part of amount past what remained (nothing remained
// when remaining ≤ 0).
func overageOf(remaining, amount int64) int64 {
	if remaining < 0 {
		remaining = 0
	}
	if amount > remaining {
		return amount - remaining
	}
	return 0
}

// Charge runs charge.lua. See quota.ChargeStore.
func (s *Store) Charge(ctx context.Context, c quota.ChargeCmd) (quota.ChargeResult, error) {
	r := c.ResourceName
	per := c.Period.ID()
	first := "0"
	if c.FirstPeriod {
		first = "1"
	}
	v, err := s.runHot(ctx, chargeScript, []string{limitKey(r), balanceKey(r, per)},
		itoa(c.Amount), itoa(c.Need), itoa(per), itoa(c.Period.EndMillis()), first)
	if err != nil {
		return quota.ChargeResult{}, wrap("charge", err)
	}
	rp := readReply("charge.lua", v, 2, 5)
	code := code(rp, chargeCharged, chargeRefused, chargeWrongPer, chargeNeedBal, chargeOverflowed)
	res := quota.ChargeResult{Now: ms(rp.int(1))}
	if n := rp.len(); (code == chargeCharged || code == chargeRefused) && n != 5 && rp.err == nil {
		rp.fail("code %d with %d elements, want 5", code, n)
	}
	if rp.err != nil {
		return quota.ChargeResult{}, wrap("charge", rp.err)
	}
	switch code {
	case chargeWrongPer:
		res.Outcome = quota.ChargeWrongPeriod
		return res, nil
	case chargeNeedBal:
		res.Outcome = quota.ChargeNeedBalance
		return res, nil
	case chargeOverflowed:
		return quota.ChargeResult{}, fmt.Errorf("charge %s: %d would overflow the period's charged counter", r, c.Amount)
	}
	res.Limit = rp.int(2)
	before := res.Limit - rp.int(3) - rp.int(4)
	res.Remaining = before
	res.Outcome = quota.ChargeRefused
	if code == chargeCharged {
		res.Outcome = quota.ChargeCharged
		res.Remaining = before - c.Amount
		res.Overage = overageOf(before, c.Amount)
	}
	return res, nil
}

// Uncharge runs uncharge.lua. See quota.ChargeStore.
func (s *Store) Uncharge(ctx context.Context, resource string, period quota.Period, amount int64) error {
	_, err := s.run(ctx, unchargeScript, []string{balanceKey(resource, period.ID())}, itoa(amount))
	return wrap("uncharge", err)
}
