package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ApplyRecord is the ledger row (USING, charged = granted) of the apply
// cmd that the balance store answered with res (granted or replayed): the
// row Service.record writes, also written by cmd/qc-baseline's ledger mode
// so that the benchmark's floor writes the same row.
func ApplyRecord(cmd ApplyCmd, res ApplyResult) UsageRecord {
	rec := UsageRecord{
		ResourceName:  cmd.ResourceName,
		ClientID:      cmd.ClientID,
		SessionID:     cmd.SessionID,
		PeriodStart:   res.PeriodStart,
		ApplyAmount:   cmd.Amount,
		MinAmount:     cmd.MinAmount,
		GrantedAmount: res.Granted,
		ChargedAmount: res.Granted,
		StartTime:     res.StartTime,
		Status:        StatusUsing,
	}
	if cmd.Pools != nil {
		// Only a pools' session keeps its split (a plain one's is its
		// grant, from the limit).
		rec.BusinessLine, rec.Drawn = cmd.Pools.Line, res.Drawn
	}
	return rec
}

// record writes the ledger row of a granted (or replayed) apply. A replay
// writes it too, idempotently: the first request may still be writing it,
// and a replay must not answer before the row is durable.
func (s *Service) record(ctx context.Context, pol Policy, cmd ApplyCmd, res ApplyResult) (ApplyResponse, error) {
	rec := ApplyRecord(cmd, res)
	resp := ApplyResponse{
		Decision:                 Decision{Granted: res.Granted, Drawn: res.Drawn},
		SessionID:                cmd.SessionID,
		Remaining:                res.Remaining,
		LeaseExpiresAt:           res.LeaseExpiresAt,
		HeartbeatIntervalSeconds: pol.HeartbeatIntervalSeconds(),
		Replayed:                 res.Outcome == ApplyReplayed,
		QuotaTight:               res.Tight,
		QuotaType:                pol.QuotaType,
	}
	err := s.insertSession(ctx, rec)
	if err == nil {
		return resp, nil
	}
	if !errors.Is(err, ErrDuplicateSession) {
		// The outcome may be unknown (the connection died after the
		// commit): read the row back before giving the reservation back.
		if s.landed(ctx, rec) {
			return resp, nil
		}
		if res.Outcome == ApplyGranted && pol.FailMode == FailOpen && isBackendFailure(err) &&
			s.markFailOpen(ctx, cmd) == nil {
			// Redis counts it; reconciliation writes the ledger row.
			resp.FailOpen, resp.FailOpenCause = true, err
			return resp, nil
		}
		if res.Outcome == ApplyGranted {
			// If the row did land after all, it must not be charged: the
			// cancelled session's tombstone says so in Redis, the
			// CANCELLED mark in the ledger (retried in the background while
			// MySQL is unreachable) whatever Redis loses. Only after the
			// give-back: while the reservation is still USING in Redis, a
			// retry replays it (same start time) and keeps the row. A
			// give-back that fails now is made once Redis answers
			// (compensation, issue 11 §3.1), and the mark follows it.
			marked := rec // captured by a closure that outlives the call: the heap copy is made here only
			s.cancel(pol, cmd, func() { s.markCancelled(marked) })
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: record session: %w", cmd.ResourceName, err)
	}
	// The id is in the ledger already: the same session (a replay whose first
	// request wrote it, or one whose Redis state expired) or another one.
	row, gerr := s.session(ctx, cmd.SessionID)
	if gerr != nil {
		if res.Outcome == ApplyGranted {
			s.cancel(pol, cmd, nil)
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: read session: %w", cmd.ResourceName, gerr)
	}
	if cmd.OtherSessionID != "" && !ownedBy(row, cmd.ResourceName, cmd.ClientID) {
		// The bare id's row is another client's (or resource's) session,
		// which Redis no longer holds: this one is to be scoped (scope.go).
		if res.Outcome == ApplyGranted {
			s.cancel(pol, cmd, nil)
		}
		return ApplyResponse{}, errScoped
	}
	same := sameApply(row, cmd)
	// A replay of a USING row's session, or of the session the row settled
	// (the store still holds it: same start). A replay of a settled row with
	// another start replays a fresh grant another request with the id made
	// after the store lost the settled session; that request gives it back
	// when its insert finds the row, so it is answered from the row below.
	fresh := row.Status != StatusUsing && !row.StartTime.Equal(res.StartTime)
	if res.Outcome == ApplyReplayed && same && row.Status != StatusCancelled && !fresh {
		return resp, nil
	}
	if same && (row.Status == StatusCancelled || (row.Status == StatusUsing && row.GrantedAmount == res.Granted &&
		row.PeriodStart.Equal(res.PeriodStart))) {
		// The row is this session's: an earlier attempt wrote it but lost the
		// answer, and its reservation was given back (or Redis lost it), and
		// its row may have been marked CANCELLED since. The retry starts
		// afresh: its reservation and the row, made its own (which fences off
		// the earlier attempt's CANCELLED mark), make the stores agree again.
		ok, rerr := s.revive(ctx, rec)
		if rerr == nil && ok {
			return resp, nil
		}
		if res.Outcome == ApplyGranted {
			s.cancel(pol, cmd, nil)
		}
		if rerr == nil {
			rerr = fmt.Errorf("its row changed meanwhile: %w", ErrUnavailable)
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: retry of session %s: %w", cmd.ResourceName, cmd.SessionID, rerr)
	}
	// A fresh reservation collided with an older row: give it back and answer
	// from the ledger (a replay) or refuse (another session's id).
	s.cancel(pol, cmd, nil)
	if !same {
		return ApplyResponse{}, fmt.Errorf("apply %s: session %s: %w", cmd.ResourceName, cmd.SessionID, ErrSessionConflict)
	}
	remaining := res.Remaining
	if res.Outcome == ApplyGranted || fresh {
		remaining += res.Granted // the reservation just given back
	}
	return ledgerReplay(pol, row, remaining), nil
}

// errScoped: record found the bare id's ledger row another session's; the
// apply is made again under the scoped id (apply).
var errScoped = errors.New("the session id's row is another session's")

// scopeFailOpen moves cmd's session under its bare id (cmd.SessionID) to
// its scoped id (cmd.OtherSessionID) when it is a fail-open session of
// cmd's client (flagged: its row is not written yet), as reconciliation
// does (internal/reconcile failopen.go): a replay of it, whose bare id's
// row is another session's, then replays it under the scoped id and
// writes its row there, instead of a second grant (docs/pools.md §5 D).
// Any other session is left where it is. Errors: the balance store's
// (ErrUnavailable), wrapped.
func (s *Service) scopeFailOpen(ctx context.Context, cmd ApplyCmd) error {
	err := GuardErr(s.redisFor(cmd.ResourceName), func() error {
		_, err := s.balances.ScopeFailOpen(ctx, cmd.ResourceName, cmd.SessionID, cmd.OtherSessionID, cmd.ClientID)
		return err
	})
	if err != nil {
		return fmt.Errorf("apply %s: scope fail-open session %s: %w", cmd.ResourceName, cmd.SessionID, err)
	}
	return nil
}

// markFailOpen flags a kept fail-open reservation, on its own deadline.
func (s *Service) markFailOpen(ctx context.Context, cmd ApplyCmd) error {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	return GuardErr(s.redisFor(cmd.ResourceName), func() error { return s.balances.MarkFailOpen(mctx, cmd.ResourceName, cmd.SessionID) })
}

// landed reports whether rec's row is in the ledger after an insert whose
// outcome is unknown. It asks once, on its own short deadline.
func (s *Service) landed(ctx context.Context, rec UsageRecord) bool {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	row, err := s.session(lctx, rec.SessionID)
	return err == nil && row.ResourceName == rec.ResourceName && row.Status == StatusUsing &&
		row.GrantedAmount == rec.GrantedAmount && row.PeriodStart.Equal(rec.PeriodStart)
}

// cancel gives back a reservation whose ledger row could not be written. It
// runs on its own deadline: the request's context may be the reason.
func (s *Service) cancel(pol Policy, cmd ApplyCmd, givenBack func()) {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	// If this fails too, the reservation is given back once the store
	// answers (compensateLater: keyed by the attempt, so not if a retry of
	// the apply replayed it meanwhile), or else by the sweeper after its
	// lease and the grace; the caller got an error, so it is never used.
	// givenBack (nil: nothing) runs once the reservation was given back.
	err := GuardErr(s.redisFor(cmd.ResourceName), func() error { return s.balances.Cancel(ctx, cmd.ResourceName, cmd.SessionID) })
	if err != nil {
		s.compensateLater(pol, cmd, givenBack)
		return
	}
	if givenBack != nil {
		givenBack()
	}
}

// insertSession writes a new ledger row, through the ledger's breaker,
// within Options.LedgerTimeout.
func (s *Service) insertSession(ctx context.Context, rec UsageRecord) error {
	if insert := s.inserter; insert != nil {
		// The deadline as a time: no derived context per apply.
		deadline := time.Now().Add(s.opt.LedgerTimeout)
		return GuardErr(s.mysql, func() error { return insert(ctx, deadline, rec) })
	}
	ctx, cancel := context.WithTimeout(ctx, s.opt.LedgerTimeout)
	defer cancel()
	return GuardErr(s.mysql, func() error { return s.ledger.InsertSession(ctx, rec) })
}

// session reads a ledger row, through the ledger's breaker, within
// Options.LedgerTimeout.
func (s *Service) session(ctx context.Context, id string) (UsageRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.LedgerTimeout)
	defer cancel()
	return Guard(s.mysql, func() (UsageRecord, error) { return s.ledger.Session(ctx, id) })
}

// sessionOf reads the ledger row of cmd's session: under its bare id when
// that row is cmd's client's on cmd's resource, else under the scoped id
// (cmd.OtherSessionID; "" = none: the bare id's row, whoever's). See
// scope.go. Errors: ErrSessionNotFound.
func (s *Service) sessionOf(ctx context.Context, cmd ApplyCmd) (UsageRecord, error) {
	row, err := s.session(ctx, cmd.SessionID)
	if cmd.OtherSessionID == "" || (err == nil && ownedBy(row, cmd.ResourceName, cmd.ClientID)) ||
		(err != nil && !errors.Is(err, ErrSessionNotFound)) {
		return row, err
	}
	return s.session(ctx, cmd.OtherSessionID)
}

// balance reads a period's balance, through the balance store's breaker.
func (s *Service) balance(ctx context.Context, resource string, per Period) (Balance, error) {
	return Guard(s.redisFor(resource), func() (Balance, error) { return s.balances.Balance(ctx, resource, per) })
}
