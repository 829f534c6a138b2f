package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// HeartbeatResponse carries the renewed lease.
type HeartbeatResponse struct {
	SessionID      string
	Status         Status
	LeaseExpiresAt time.Time
	PolicyVersion  string // see policyVersion
}

// Heartbeat renews a USING session's lease to now + leakThresholdSeconds
// (store clock). It touches the BalanceStore only (and the ledger for a
// session the store lost). A clientID other than "" (the API key's, or the
// one the caller gave) scopes sessionID to that client (scope.go) and must
// own the session; "" finds only sessions stored under the bare id.
//
// Errors: *ValidationError, ErrResourceNotFound, ErrSessionNotFound (also
// when the session belongs to another resource, and for an apply answered
// 503, CANCELLED), *NotActiveError (FINISHED or LEAKED), ErrUnavailable.
func (s *Service) Heartbeat(ctx context.Context, resource, sessionID, clientID string) (resp HeartbeatResponse, err error) {
	if err := ValidateResourceName(resource); err != nil {
		return HeartbeatResponse{}, err
	}
	if err := validateSessionID(sessionID); err != nil {
		return HeartbeatResponse{}, err
	}
	if clientID != "" {
		if err := ValidateClientID(clientID); err != nil {
			return HeartbeatResponse{}, err
		}
	}
	pol, err := s.Policy(ctx, resource)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	defer func() {
		if err == nil {
			resp.PolicyVersion = s.policyVersion(ctx, pol)
		}
	}()
	// The bare id (with the owner check), then the scoped one (scope.go).
	scoped := lookupForm(resource, clientID, sessionID)
	resp, err = s.heartbeat(ctx, pol, sessionID, clientID)
	if scoped != "" && errors.Is(err, ErrSessionNotFound) {
		resp, err = s.heartbeat(ctx, pol, scoped, clientID)
	}
	if err != nil {
		return HeartbeatResponse{}, publicError(err, scoped, sessionID)
	}
	resp.SessionID = sessionID
	return resp, nil
}

// heartbeat renews the session stored under sessionID (scope.go) for a
// caller of clientID ("" = any).
func (s *Service) heartbeat(ctx context.Context, pol Policy, sessionID, clientID string) (HeartbeatResponse, error) {
	resource := pol.ResourceName
	renew := func() (time.Time, error) {
		return Guard(s.redisFor(resource), func() (time.Time, error) {
			return s.balances.Heartbeat(ctx, resource, sessionID, clientID, pol.LeaseDuration())
		})
	}
	exp, err := renew()
	if errors.Is(err, ErrSessionNotFound) {
		// Past its retention in the store a settled session is known to the
		// ledger only; it is still not active.
		row, lerr := s.session(ctx, sessionID)
		if lerr == nil && row.ResourceName == resource && owns(clientID, row.ClientID) && row.Status != StatusCancelled {
			if row.Status != StatusUsing {
				return HeartbeatResponse{}, &NotActiveError{SessionID: sessionID, Status: row.Status}
			}
			// Open in the ledger but gone from Redis (Redis lost its state):
			// bring it back now and renew it.
			if rerr := s.restoreSession(ctx, pol, row); rerr == nil {
				if exp, err = renew(); err == nil {
					return HeartbeatResponse{SessionID: sessionID, Status: StatusUsing, LeaseExpiresAt: exp}, nil
				}
			}
			return HeartbeatResponse{}, fmt.Errorf("heartbeat %s: session %s is being restored from the ledger: %w",
				resource, sessionID, ErrUnavailable)
		}
	}
	if err != nil {
		return HeartbeatResponse{}, fmt.Errorf("heartbeat %s: %w", resource, err)
	}
	return HeartbeatResponse{SessionID: sessionID, Status: StatusUsing, LeaseExpiresAt: exp}, nil
}
