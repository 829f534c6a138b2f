package quota

import (
	"context"
	"fmt"
)

// StatusResponse is a resource's current period. Amounts are in the policy's
// unit; Remaining may be negative after an overage or a lowered limit.
type StatusResponse struct {
	Policy         Policy
	Used           int64 // charged: finished and leaked sessions, overage included
	Reserved       int64 // grants of USING sessions of this period
	Remaining      int64
	ActiveSessions int64
	Period         Period
}

// Status reads the current period's balance. It never charges; it seeds the
// period's balance from the ledger when the store has none yet.
//
// Errors: *ValidationError, ErrResourceNotFound, ErrUnavailable.
func (s *Service) Status(ctx context.Context, resource string) (StatusResponse, error) {
	if err := ValidateResourceName(resource); err != nil {
		return StatusResponse{}, err
	}
	pol, err := s.Policy(ctx, resource)
	if err != nil {
		return StatusResponse{}, err
	}
	per, err := s.policies.periodAt(pol, s.opt.Now())
	if err != nil {
		return StatusResponse{}, fmt.Errorf("status %s: %w", resource, err)
	}
	bal, err := s.seededBalance(ctx, pol, per)
	if err != nil {
		return StatusResponse{}, fmt.Errorf("status %s: %w", resource, err)
	}
	return statusOf(pol, per, bal), nil
}

// seededBalance reads pol's balance of per, seeding it from the ledger when
// the store has none (Redis lost its state, or the period has just begun).
// A balance can be dropped again right after it was seeded (a second
// instance's failover repair): it is seeded again rather than answered with
// the figures of a missing balance (all 0), a bounded number of times.
//
// Errors: ErrUnavailable (the store or the ledger did not answer, or the
// balance kept disappearing).
func (s *Service) seededBalance(ctx context.Context, pol Policy, per Period) (Balance, error) {
	bal, err := s.balance(ctx, pol.ResourceName, per)
	for try := 0; err == nil && !bal.Exists; try++ {
		if try == maxAttempts {
			return Balance{}, fmt.Errorf("the balance kept disappearing after seeding: %w", ErrUnavailable)
		}
		if err = s.seed(ctx, pol, per); err == nil {
			bal, err = s.balance(ctx, pol.ResourceName, per)
		}
	}
	return bal, err
}
