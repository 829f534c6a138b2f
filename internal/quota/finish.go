package quota

import (
	"context"
	"errors"
	"fmt"
)

// FinishRequest reports a session's real usage, in the policy's unit.
type FinishRequest struct {
	ResourceName string
	SessionID    string
	ClientID     string // the caller's client (the API key's, or as given); "" = any, bare ids only (scope.go)
	Actual       int64  // 0 … 2^53−1
}

// FinishResponse says what the finish settled. Charged is the actual usage;
// Refunded = granted − actual when positive; Overage = actual − granted when
// positive (charged, never capped).
type FinishResponse struct {
	SessionID string
	Granted   int64
	Charged   int64
	Refunded  int64
	Overage   int64
	Remaining int64 // of the session's period
	Replayed  bool
	WasLeaked bool
	QuotaType QuotaType
}

// Finish settles a session: the grant is replaced by the actual usage in the
// session's own period (a session of an earlier period refunds there, never
// into the current one), then the ledger row is settled. Repeats return the
// first answer and refund once; a LEAKED session is trued up once.
//
// Errors: *ValidationError, ErrResourceNotFound, ErrSessionNotFound (also
// for an apply answered 503, CANCELLED), ErrSessionConflict (a repeat with another actualUsedAmount), ErrUnavailable
// (the ledger could not be written; a retry completes it).
func (s *Service) Finish(ctx context.Context, req FinishRequest) (FinishResponse, error) {
	if err := ValidateResourceName(req.ResourceName); err != nil {
		return FinishResponse{}, err
	}
	if err := validateSessionID(req.SessionID); err != nil {
		return FinishResponse{}, err
	}
	if req.ClientID != "" {
		if err := ValidateClientID(req.ClientID); err != nil {
			return FinishResponse{}, err
		}
	}
	if err := ValidateAmount("actualUsedAmount", req.Actual, true); err != nil {
		return FinishResponse{}, err
	}
	pol, err := s.Policy(ctx, req.ResourceName)
	if err != nil {
		return FinishResponse{}, err
	}
	// The bare id (with the owner check), then the scoped one (scope.go).
	public := req.SessionID
	scoped := lookupForm(req.ResourceName, req.ClientID, public)
	resp, err := s.finish(ctx, pol, req)
	if scoped != "" && errors.Is(err, ErrSessionNotFound) {
		req.SessionID = scoped
		resp, err = s.finish(ctx, pol, req)
	}
	if err != nil {
		return FinishResponse{}, publicError(err, scoped, public)
	}
	resp.SessionID = public
	return resp, nil
}

// finish settles the session stored under req.SessionID (scope.go).
func (s *Service) finish(ctx context.Context, pol Policy, req FinishRequest) (FinishResponse, error) {
	res, err := s.finishInStore(ctx, req)
	if errors.Is(err, ErrSessionNotFound) {
		return s.finishFromLedger(ctx, pol, req)
	}
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	return s.settle(ctx, pol, req, res)
}

// finishInStore runs the BalanceStore's side of a finish.
func (s *Service) finishInStore(ctx context.Context, req FinishRequest) (FinishResult, error) {
	return Guard(s.redisFor(req.ResourceName), func() (FinishResult, error) {
		return s.balances.Finish(ctx, FinishCmd{
			ResourceName: req.ResourceName, SessionID: req.SessionID, ClientID: req.ClientID,
			Actual: req.Actual, Retention: s.opt.FinishedRetention,
		})
	})
}

// FinishRecord is the settling update (FINISHED, with charged, refunded
// and overage) of the ledger row of session sessionID of resource, for a
// finish the balance store answered with res (done or replayed): the update
// Service.settle writes, also written by cmd/qc-baseline's ledger mode.
func FinishRecord(resource, sessionID string, res FinishResult) UsageRecord {
	return UsageRecord{
		ResourceName:   resource,
		ClientID:       res.ClientID,
		SessionID:      sessionID,
		PeriodStart:    res.PeriodStart,
		GrantedAmount:  res.Granted,
		ChargedAmount:  res.Charged,
		RefundedAmount: res.Refunded,
		OverageAmount:  res.Overage,
		StartTime:      res.StartTime,
		EndTime:        res.EndTime,
		Status:         StatusFinished,
		LeakRecovered:  res.WasLeaked,
	}
}

// settle writes the ledger side of a finish the BalanceStore did (or
// replayed) and builds the answer.
func (s *Service) settle(ctx context.Context, pol Policy, req FinishRequest, res FinishResult) (FinishResponse, error) {
	rec := FinishRecord(req.ResourceName, req.SessionID, res)
	// Always settle the row, also on a replay: the first finish may have
	// settled Redis and then failed to reach the ledger.
	lctx, cancel := context.WithTimeout(ctx, s.opt.LedgerTimeout)
	defer cancel()
	err := GuardErr(s.mysql, func() error { return s.ledger.FinishSession(lctx, rec) })
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: record: %w", req.ResourceName, err)
	}
	return FinishResponse{
		SessionID: req.SessionID, Granted: res.Granted, Charged: res.Charged,
		Refunded: res.Refunded, Overage: res.Overage, Remaining: res.Remaining,
		Replayed: res.Replayed, WasLeaked: res.WasLeaked, QuotaType: pol.QuotaType,
	}, nil
}

// finishLeakedFromLedger trues up a late finish of a session swept as
// LEAKED that the store no longer holds (known gap G4, issue 11 §3.3: Redis
// lost it, restarted empty or flushed). Within QC_FINISHED_RETENTION of the
// sweep, the ledger row (grant, period, when it was swept) brings the session
// back as LEAKED and the store's finish trues it up as any late finish —
// atomically and once, however many finishes race — then the ledger row is
// settled. Past the retention it is *NotActiveError, as before.
func (s *Service) finishLeakedFromLedger(ctx context.Context, pol Policy, req FinishRequest, row UsageRecord) (FinishResponse, error) {
	if row.EndTime.IsZero() || !s.opt.Now().Before(row.EndTime.Add(s.opt.FinishedRetention)) {
		return FinishResponse{}, &NotActiveError{SessionID: req.SessionID, Status: row.Status}
	}
	err := GuardErr(s.redisFor(req.ResourceName), func() error {
		return s.balances.RestoreLeaked(ctx, req.ResourceName, row, s.opt.FinishedRetention)
	})
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: restore leaked session %s: %w", req.ResourceName, req.SessionID, err)
	}
	res, err := s.finishInStore(ctx, req)
	if errors.Is(err, ErrSessionNotFound) {
		// Its retention ended in between.
		return FinishResponse{}, &NotActiveError{SessionID: req.SessionID, Status: row.Status}
	}
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	return s.settle(ctx, pol, req, res)
}

// finishFromLedger answers a finish for a session the BalanceStore no longer
// holds: a repeat after its retention is answered from the ledger row.
func (s *Service) finishFromLedger(ctx context.Context, pol Policy, req FinishRequest) (FinishResponse, error) {
	row, err := s.session(ctx, req.SessionID)
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	if row.ResourceName != req.ResourceName || !owns(req.ClientID, row.ClientID) || row.Status == StatusCancelled {
		// A CANCELLED row is an apply answered 503: there is no session.
		return FinishResponse{}, fmt.Errorf("finish %s: session %s: %w", req.ResourceName, req.SessionID, ErrSessionNotFound)
	}
	if row.Status == StatusLeaked {
		return s.finishLeakedFromLedger(ctx, pol, req, row)
	}
	if row.Status == StatusUsing {
		// The row is open but Redis lost the session: bring it back (with
		// the period's balance, if that is gone too) and settle it there.
		if err := s.restoreSession(ctx, pol, row); err != nil {
			return FinishResponse{}, fmt.Errorf("finish %s: restore session %s: %w", req.ResourceName, req.SessionID, err)
		}
		if res, err := s.finishInStore(ctx, req); err == nil {
			return s.settle(ctx, pol, req, res)
		}
	}
	if row.Status != StatusFinished {
		return FinishResponse{}, fmt.Errorf("finish %s: session %s is %s in the ledger but missing from the balance store: %w",
			req.ResourceName, req.SessionID, row.Status, ErrUnavailable)
	}
	if row.ChargedAmount != req.Actual {
		return FinishResponse{}, fmt.Errorf("finish %s: session %s was finished with another amount: %w",
			req.ResourceName, req.SessionID, ErrSessionConflict)
	}
	per, err := s.sched.PeriodAt(pol, row.PeriodStart)
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	bal, err := s.replayBalance(ctx, pol, per)
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	return FinishResponse{
		SessionID: req.SessionID, Granted: row.GrantedAmount, Charged: row.ChargedAmount,
		Refunded: row.RefundedAmount, Overage: row.OverageAmount, Remaining: bal.Remaining(),
		Replayed: true, WasLeaked: row.LeakRecovered, QuotaType: pol.QuotaType,
	}, nil
}

// replayBalance is the balance a finish answered from the ledger reports
// remaining of: per's, seeded first when per is the current period and the
// store lost it (else the answer said 0 left after a Redis restart). An
// earlier period's balance that is gone is not brought back for an answer:
// its remaining is 0, as the store answers a finish then.
func (s *Service) replayBalance(ctx context.Context, pol Policy, per Period) (Balance, error) {
	if cur, err := s.policies.periodAt(pol, s.opt.Now()); err == nil && cur == per {
		return s.seededBalance(ctx, pol, per)
	}
	return s.balance(ctx, pol.ResourceName, per)
}
