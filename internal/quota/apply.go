package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// maxAttempts bounds the retries of one apply across period roll-over and
// balance seeding; more means the stores disagree with each other.
const maxAttempts = 4

// ApplyRequest asks for Amount of a resource. Amounts are in the policy's
// unit (seconds, calls, tokens or bytes).
type ApplyRequest struct {
	ResourceName string
	Amount       int64  // 1 … 2^53−1
	MinAmount    int64  // 0 = all-or-nothing; else grant min(Amount, remaining) if ≥ MinAmount
	ClientID     string // optional, up to 128 chars of [A-Za-z0-9_.:@/-]
	SessionID    string // optional idempotency key; generated when empty
	// BusinessLine: required on a resource with business lines, refused on
	// one without (internal/pools).
	BusinessLine string
	// NonCritical: a preview or debug call ("critical": false), refused
	// above a CORE line's watermark.
	NonCritical bool
	// Continuation: more work for a running conversation or job, never
	// refused by a watermark.
	Continuation bool
}

// Decision is what an apply decided: a grant and the pools it drew from,
// or a refusal and why.
type Decision struct {
	// Granted is the amount reserved, in the policy's unit; 0 when refused.
	Granted int64
	// Drawn is which pools the grant was taken from, summing to Granted
	// (a resource without lines: all of it from its limit, Base), as the
	// balance store answered it (ApplyResult.Drawn) and as the API's
	// "drawn" shows it. Zero for a refusal and for a fail-open grant that
	// no live balance counted (FailOpen with the BalanceStore unreachable).
	Drawn PoolSplit
	// Refusal is set when nothing was granted or changed.
	Refusal *Refusal
}

// Refused reports whether the apply was refused.
func (d Decision) Refused() bool { return d.Refusal != nil }

// RefusalReason says why an apply granted nothing.
type RefusalReason string

// Refusal reasons.
const (
	// RefusedExhausted: the resource's balance for the period holds less than
	// applyAmount (less than minAmount for a partial grant). HTTP 429
	// QUOTA_EXHAUSTED.
	RefusedExhausted RefusalReason = "EXHAUSTED"
)

// Refusal is why an apply was refused and when to come back.
type Refusal struct {
	Reason RefusalReason
	// NextResetAt is when the refusing balance's period ends and it is
	// refilled; zero when the policy never resets.
	NextResetAt time.Time
}

// ApplyResponse is the answer to an apply: its Decision and the session
// it made. When Refused, nothing was granted or changed and Remaining is
// what remains.
type ApplyResponse struct {
	Decision
	SessionID string
	Remaining int64 // of the period (limit − charged − reserved), also on a business line
	// LineRemaining: of a grant on a business line counted in Redis, what
	// the line could still be granted after it (ApplyResult.LineRemaining;
	// a replay: as first answered); of a refusal on a line, what it could
	// be granted now (less than it asked, or held back by its watermark);
	// nil otherwise.
	LineRemaining            *int64
	LeaseExpiresAt           time.Time
	HeartbeatIntervalSeconds int64
	Replayed                 bool
	QuotaType                QuotaType
	// FailOpen: granted by a FailMode OPEN policy while the stores could not
	// decide; Remaining is −1 (unknown). FailOpenRecorded says whether the
	// ledger row was written; FailOpenCause is the backend error.
	FailOpen bool
	// QuotaTight: a business line's grant while buffer is lent to the line
	// (elasticity saw its quota getting tight): degrade non-critical work.
	QuotaTight       bool
	FailOpenRecorded bool
	FailOpenCause    error
	// PolicyVersion: see policyVersion; set on grants.
	PolicyVersion string
}

func (r ApplyRequest) validate() error {
	if err := ValidateResourceName(r.ResourceName); err != nil {
		return err
	}
	if err := ValidateAmount("applyAmount", r.Amount, false); err != nil {
		return err
	}
	if err := ValidateAmount("minAmount", r.MinAmount, true); err != nil {
		return err
	}
	if r.MinAmount > r.Amount {
		return invalid("minAmount", "must not exceed applyAmount")
	}
	if r.ClientID != "" {
		if err := ValidateClientID(r.ClientID); err != nil {
			return err
		}
	}
	if r.SessionID != "" {
		return validateSessionID(r.SessionID)
	}
	return nil
}

// Apply checks and reserves in one atomic step of the BalanceStore, then
// records the session in the ledger before answering. A refused apply
// (Refused) changes nothing. A repeated SessionID returns the first answer
// and charges once.
//
// Errors: *ValidationError, ErrResourceNotFound, ErrSessionConflict (the
// session id exists with another resource, amount or client),
// *NotActiveError (a repeat whose session's lease is over and which is no
// longer USING: LEAKED or FINISHED), ErrUnavailable (a backend failed; any
// reservation made was given back).
func (s *Service) Apply(ctx context.Context, req ApplyRequest) (resp ApplyResponse, err error) {
	if err := req.validate(); err != nil {
		return ApplyResponse{}, err
	}
	pol, err := s.Policy(ctx, req.ResourceName)
	if err != nil {
		return ApplyResponse{}, err
	}
	defer func() {
		if err == nil && !resp.Refused() {
			resp.PolicyVersion = s.policyVersion(ctx, pol)
		}
	}()
	per, err := s.policies.periodAt(pol, s.opt.Now())
	if err != nil {
		return ApplyResponse{}, fmt.Errorf("apply %s: %w", req.ResourceName, err)
	}
	public := req.SessionID
	if public == "" {
		public = s.opt.NewSessionID()
	}
	scoped := s.scopedForm(req.ResourceName, req.ClientID, public)
	defer func() {
		// Answers name the id the client knows (scope.go).
		if err != nil {
			err = publicError(err, scoped, public)
		} else {
			resp.SessionID = public
		}
	}()
	cmd := ApplyCmd{
		ResourceName:   req.ResourceName,
		SessionID:      public,
		ClientID:       req.ClientID,
		Amount:         req.Amount,
		MinAmount:      req.MinAmount,
		Period:         per,
		Lease:          pol.LeaseDuration(),
		FirstPeriod:    isFirstPeriod(pol, per),
		OtherSessionID: scoped,
	}
	cmd.Attempt = randomID()
	if cmd.Pools, err = s.poolsCmd(ctx, pol, req); err != nil {
		if pol.FailMode == FailOpen && isBackendFailure(err) {
			// The pools settings live in MySQL: while it is down an OPEN
			// policy still fails open, as it does for any other store failure.
			return s.failOpen(ctx, pol, cmd, err), nil
		}
		return ApplyResponse{}, err
	}
	resp, err = s.apply(ctx, pol, cmd)
	if err != nil && pol.FailMode == FailOpen && isBackendFailure(err) {
		return s.failOpen(ctx, pol, cmd, err), nil
	}
	if err == nil && resp.Refused() && req.SessionID != "" {
		// Redis no longer holds the session (past QC_FINISHED_RETENTION, or
		// lost), so it took a repeat for a new apply and refused it. If the
		// ledger has the session, this is a repeat: answer it as one.
		// A CANCELLED row was refused (503) and charged nothing: the repeat
		// started afresh, and its refusal is the answer.
		if row, lerr := s.sessionOf(ctx, cmd); lerr == nil && row.Status != StatusCancelled {
			if !sameApply(row, cmd) {
				return ApplyResponse{}, fmt.Errorf("apply %s: session %s: %w", cmd.ResourceName, cmd.SessionID, ErrSessionConflict)
			}
			resp = ledgerReplay(pol, row, resp.Remaining)
		}
	}
	if err == nil && resp.Replayed && !resp.LeaseExpiresAt.After(s.opt.Now()) {
		return s.renewReplay(ctx, pol, cmd, resp)
	}
	return resp, err
}

// renewReplay answers a replayed apply whose first answer's lease is over
// (issue 11 §3.2: a retry after the first request's instance died got the
// original, expired lease, and its first heartbeat was 409 LEAKED). The
// session is renewed as a heartbeat would renew it, and the answer carries
// the new lease; a session that is no longer USING (swept as LEAKED, or
// finished) answers *NotActiveError with its status, so the caller knows
// it holds nothing. If the renewal cannot be made, the error (unavailable)
// is returned rather than a lease that is over.
//
// resp.SessionID is the stored id of the session replayed (either form).
func (s *Service) renewReplay(ctx context.Context, pol Policy, cmd ApplyCmd, resp ApplyResponse) (ApplyResponse, error) {
	hb, err := s.heartbeat(ctx, pol, resp.SessionID, cmd.ClientID)
	var na *NotActiveError
	if errors.As(err, &na) {
		// Said as an apply's answer, not as the heartbeat's that found it
		// ("… heartbeat r: session s is LEAKED" read as if the caller had
		// sent a heartbeat).
		return ApplyResponse{}, fmt.Errorf("apply %s: a replay of session %s, whose lease is over: it holds nothing now (apply with a new sessionId): %w",
			cmd.ResourceName, cmd.SessionID, na)
	}
	if err != nil {
		return ApplyResponse{}, fmt.Errorf("apply %s: replay of session %s: %w", cmd.ResourceName, cmd.SessionID, err)
	}
	resp.LeaseExpiresAt = hb.LeaseExpiresAt
	return resp, nil
}

// isFirstPeriod reports whether per is the first period of pol's sequence,
// which starts at its creation or its last manual reset (PeriodAnchor, to
// the millisecond, as stored).
func isFirstPeriod(pol Policy, per Period) bool {
	return per.Start.Equal(pol.PeriodAnchor())
}

// sameApply reports whether a ledger row was written by an apply with cmd's
// arguments (the rule that makes a repeated apply a replay, not a conflict).
func sameApply(row UsageRecord, cmd ApplyCmd) bool {
	return row.ResourceName == cmd.ResourceName && row.ApplyAmount == cmd.Amount &&
		row.MinAmount == cmd.MinAmount && row.ClientID == cmd.ClientID
}

// ledgerReplay answers a repeated apply from the session's ledger row, when
// Redis no longer has the session: its grant and lease as first answered,
// and remaining as it is now (the ledger does not keep the first answer's).
func ledgerReplay(pol Policy, row UsageRecord, remaining int64) ApplyResponse {
	draws := row.Drawn
	if !row.PoolSession() {
		draws = PoolSplit{Base: row.GrantedAmount} // a plain session keeps no split
	}
	return ApplyResponse{
		Decision:  Decision{Granted: row.GrantedAmount, Drawn: draws},
		SessionID: row.SessionID, Remaining: remaining,
		LeaseExpiresAt:           row.StartTime.Add(pol.LeaseDuration()),
		HeartbeatIntervalSeconds: pol.HeartbeatIntervalSeconds(),
		Replayed:                 true, QuotaType: pol.QuotaType,
	}
}

// failOpen grants an apply of a FailMode OPEN policy that the stores could
// not decide: the whole amount, with no remaining known (−1). It writes the
// ledger row if MySQL answers, so reconciliation can count the session in
// Redis later; FailOpen in the answer says it was not counted live.
func (s *Service) failOpen(ctx context.Context, pol Policy, cmd ApplyCmd, cause error) ApplyResponse {
	now := s.opt.Now().UTC().Truncate(time.Millisecond)
	rec := UsageRecord{
		ResourceName: cmd.ResourceName, ClientID: cmd.ClientID, SessionID: cmd.SessionID,
		PeriodStart: cmd.Period.Start, ApplyAmount: cmd.Amount, MinAmount: cmd.MinAmount,
		GrantedAmount: cmd.Amount, ChargedAmount: cmd.Amount, StartTime: now, Status: StatusUsing,
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	recorded := s.insertSession(lctx, rec) == nil
	return ApplyResponse{
		Decision:  Decision{Granted: cmd.Amount},
		SessionID: cmd.SessionID, Remaining: -1,
		LeaseExpiresAt: now.Add(pol.LeaseDuration()), HeartbeatIntervalSeconds: pol.HeartbeatIntervalSeconds(),
		QuotaType: pol.QuotaType, FailOpen: true, FailOpenRecorded: recorded, FailOpenCause: cause,
	}
}

// apply runs the check-and-reserve loop across period roll-over and seeding.
func (s *Service) apply(ctx context.Context, pol Policy, cmd ApplyCmd) (ApplyResponse, error) {
	for range maxAttempts {
		res, err := Guard(s.redisFor(cmd.ResourceName), func() (ApplyResult, error) { return s.balances.Apply(ctx, cmd) })
		if err != nil && cmd.Pools != nil && s.pooled() && errors.Is(err, pools.ErrUnknownLine) {
			// Redis lost the layout, or a line change overtook this
			// instance's cached lines: the stored lines decide, in turn.
			res, err = s.applyInTurn(ctx, pol, cmd)
			if ve := (*ValidationError)(nil); errors.As(err, &ve) {
				return ApplyResponse{}, ve
			}
		}
		if err != nil {
			if mayHaveRun(err) {
				// Answered 503, but the script may have reserved all the same
				// (issue 11 §3.1): give that back once the store answers,
				// under whichever form of the id it used (scope.go).
				s.compensateLater(pol, cmd, nil)
				if cmd.OtherSessionID != "" {
					scoped := cmd
					scoped.SessionID = cmd.OtherSessionID
					s.compensateLater(pol, scoped, nil)
				}
			}
			return ApplyResponse{}, fmt.Errorf("apply %s: %w", cmd.ResourceName, err)
		}
		if res.SpareMove != "" {
			// The spare buffer's move (granted or refused) is journalled
			// before the session's ledger row; if that fails, Redis keeps
			// its note for the next drain (sparejournal.go).
			_ = s.journalSpare(ctx, cmd.ResourceName, []string{res.SpareMove})
		}
		switch res.Outcome {
		case ApplyWrongPeriod:
			if cmd.Period, err = s.sched.PeriodAt(pol, res.Now); err != nil {
				return ApplyResponse{}, fmt.Errorf("apply %s: %w", cmd.ResourceName, err)
			}
			cmd.FirstPeriod = isFirstPeriod(pol, cmd.Period)
			continue
		case ApplyNeedBalance:
			if err := s.seed(ctx, pol, cmd.Period); err != nil {
				return ApplyResponse{}, fmt.Errorf("apply %s: %w", cmd.ResourceName, err)
			}
			continue
		case ApplyExhausted:
			resp := ApplyResponse{
				Decision:  Decision{Refusal: &Refusal{Reason: refusalReason(res), NextResetAt: cmd.Period.End}},
				Remaining: res.Remaining, QuotaType: pol.QuotaType,
			}
			if cmd.Pools != nil && cmd.Pools.Line != "" {
				lr := res.LineRemaining
				resp.LineRemaining = &lr
			}
			return resp, nil
		case ApplyGranted, ApplyReplayed:
			if res.OtherForm {
				// Granted or replayed under the scoped id (scope.go).
				cmd.SessionID, cmd.OtherSessionID = cmd.OtherSessionID, ""
			}
			resp, err := s.record(ctx, pol, cmd, res)
			if errors.Is(err, errScoped) {
				// The bare id's ledger row is another session's: apply
				// again under the scoped id alone. A replay of a fail-open
				// session (no row yet) moves it there first, so that the
				// apply replays it rather than granting anew.
				if res.Outcome == ApplyReplayed {
					if err := s.scopeFailOpen(ctx, cmd); err != nil {
						return ApplyResponse{}, err
					}
				}
				cmd.SessionID, cmd.OtherSessionID = cmd.OtherSessionID, ""
				continue
			}
			if err == nil && cmd.Pools != nil && cmd.Pools.Line != "" {
				lr := res.LineRemaining
				resp.LineRemaining = &lr
			}
			return resp, err
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: unknown store outcome %d", cmd.ResourceName, res.Outcome)
	}
	return ApplyResponse{}, fmt.Errorf("apply %s: period or balance kept changing: %w", cmd.ResourceName, ErrUnavailable)
}
