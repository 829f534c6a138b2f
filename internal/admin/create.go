package admin

import (
	"context"
	"errors"

	"github.com/quotacenter/quota-center/internal/quota"
)

// ErrExists: CreatePolicy was asked for a resource that already has a
// policy (HTTP 409 CONFLICT); nothing is stored.
var ErrExists = quota.NewError(quota.CodeConflict, "a policy with this name already exists: edit it instead")

// CreatePolicy stores a new policy through the same call PUT
// /admin/policies/{r} makes (quota.Service.PutPolicy: its defaults —
// timezone UTC, leak threshold 300 s, fail mode CLOSED — and its checks),
// audited as policy.put with reason under the context's actor. Unlike PUT
// it never replaces: a name that already has a policy is refused with
// ErrExists (the console's "New policy" form, issue 21 §3).
//
// The existence check and the store are two steps: two creates of one new
// name racing each other can both pass the check, and the later one is
// stored (as two PUTs would be); each is audited.
//
// Errors: *quota.ValidationError (a bad name, reason or field; nothing is
// stored), ErrExists, quota.ErrUnavailable.
func (s *Service) CreatePolicy(ctx context.Context, p quota.Policy, reason string) (quota.Policy, error) {
	if err := quota.ValidateResourceName(p.ResourceName); err != nil {
		return quota.Policy{}, err
	}
	if err := quota.ValidateReason(reason); err != nil {
		return quota.Policy{}, err
	}
	_, err := s.d.Ledger.GetPolicy(ctx, p.ResourceName)
	switch {
	case err == nil:
		return quota.Policy{}, ErrExists
	case !errors.Is(err, quota.ErrResourceNotFound):
		return quota.Policy{}, err
	}
	stored, _, err := s.d.Quota.PutPolicy(quota.WithReason(ctx, reason), p)
	return stored, err
}
