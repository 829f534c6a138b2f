package quota

import (
	"context"
	"fmt"
)

// BalanceRead names one balance of a batch read: Resource's balance in
// Period.
type BalanceRead struct {
	Resource string
	Period   Period
}

// BalanceBatchReader is a balance store that reads many balances in a few
// round trips (internal/redisstore: pipelines of up to 500). The i-th
// answer and error are reads[i]'s; each error is one Balance would have
// returned.
type BalanceBatchReader interface {
	Balances(ctx context.Context, reads []BalanceRead) ([]Balance, []error)
}

// StatusResult is one resource's answer of Statuses: what Status returns.
type StatusResult struct {
	Status StatusResponse
	Err    error
}

// Statuses is Status of each of resources (the i-th result is
// resources[i]'s), with the balances read in one batch when the balance
// store is a BalanceBatchReader (issue 23 §1: a scrape of 1,000 used
// resources read them one call each, ~31 rounds of 32), else one call
// each. Each resource's read passes its own Redis breaker (on a cluster,
// its master's); a balance that does not exist is seeded and read again
// as Status does, one at a time. The policies the cache has no fresh
// answer for are read in one query first when the policy store is a
// PolicyBatchReader. Errors, per resource: Status's.
func (s *Service) Statuses(ctx context.Context, resources []string) []StatusResult {
	out := make([]StatusResult, len(resources))
	s.policies.warm(ctx, resources) // their policies in one query, not one refresh each
	bb, ok := s.balances.(BalanceBatchReader)
	if !ok {
		for i, r := range resources {
			out[i].Status, out[i].Err = s.Status(ctx, r)
		}
		return out
	}
	type pending struct {
		i    int
		pol  Policy
		per  Period
		done func(error)
	}
	var (
		reads []BalanceRead
		ps    []pending
	)
	for i, r := range resources {
		if err := ValidateResourceName(r); err != nil {
			out[i].Err = err
			continue
		}
		pol, err := s.Policy(ctx, r)
		if err != nil {
			out[i].Err = err
			continue
		}
		per, err := s.policies.periodAt(pol, s.opt.Now())
		if err != nil {
			out[i].Err = fmt.Errorf("status %s: %w", r, err)
			continue
		}
		done := func(error) {}
		if b := s.redisFor(r); b != nil {
			d, err := b.Allow()
			if err != nil {
				out[i].Err = fmt.Errorf("status %s: %w", r, err)
				continue
			}
			done = d
		}
		reads = append(reads, BalanceRead{Resource: r, Period: per})
		ps = append(ps, pending{i: i, pol: pol, per: per, done: done})
	}
	if len(reads) == 0 {
		return out
	}
	bals, errs := bb.Balances(ctx, reads)
	for j, p := range ps {
		p.done(errs[j])
		r := p.pol.ResourceName
		if errs[j] != nil {
			out[p.i].Err = fmt.Errorf("status %s: %w", r, errs[j])
			continue
		}
		bal := bals[j]
		if !bal.Exists { // seeded from the ledger, as Status does
			var err error
			if bal, err = s.seededBalance(ctx, p.pol, p.per); err != nil {
				out[p.i].Err = fmt.Errorf("status %s: %w", r, err)
				continue
			}
		}
		out[p.i].Status = statusOf(p.pol, p.per, bal)
	}
	return out
}

// statusOf is the status of pol's balance bal in period per.
func statusOf(pol Policy, per Period, bal Balance) StatusResponse {
	pol.TotalLimit = bal.Limit
	return StatusResponse{
		Policy: pol, Used: bal.Charged, Reserved: bal.Reserved, Remaining: bal.Remaining(),
		ActiveSessions: bal.ActiveSessions, Period: per,
	}
}
