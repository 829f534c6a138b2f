package admin

import (
	"context"

	"github.com/quotacenter/quota-center/internal/quota"
)

// ErrExists: CreatePolicy was asked for a resource that already has a
// policy (HTTP 409 CONFLICT); nothing is stored.
var ErrExists = quota.NewError(quota.CodeConflict, "a policy with this name already exists: edit it instead")

// CreatePolicy stores a new policy with the checks and defaults of the call
// PUT /admin/policies/{r} makes (quota.Service.CreatePolicy, PutPolicy's
// twin: timezone UTC, leak threshold 300 s, fail mode CLOSED), audited as
// policy.put with reason under the context's actor. Unlike PUT it never
// replaces: a name that already has a policy is refused with ErrExists (the
// console's "New policy" form, issue 21 §3). The store's insert is the
// check, one atomic step: of creates of one new name racing each other
// exactly one is stored and audited, the others get ErrExists.
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
	stored, created, err := s.d.Quota.CreatePolicy(quota.WithReason(ctx, reason), p)
	switch {
	case err != nil:
		return quota.Policy{}, err
	case !created:
		return quota.Policy{}, ErrExists
	}
	return stored, nil
}
