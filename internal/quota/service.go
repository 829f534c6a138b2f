package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Options tune a Service. Zero values take the documented defaults.
type Options struct {
	// PolicyCacheTTL is how long a policy read from the PolicyStore is reused
	// (default 2s). Limits are read from the BalanceStore on every apply, so
	// a limit change applies at once whatever this is; the cron, timezone and
	// leak threshold of a changed policy reach other instances within it.
	PolicyCacheTTL time.Duration
	// FinishedRetention is how long a finished or leaked session is kept in
	// the BalanceStore to answer repeats cheaply (default 24h); after it the
	// ledger answers them.
	FinishedRetention time.Duration
	// Now is the local clock (default time.Now). It only picks the likely
	// period; the BalanceStore's clock decides.
	Now func() time.Time
	// NewSessionID makes server-side session ids (default: 32 hex chars).
	NewSessionID func() string
	// Audit, when set, records every policy change (PutPolicy); nil records
	// nothing.
	Audit AuditLog
}

// Service applies the accounting rules: check-and-reserve on apply, lease
// renewal on heartbeat, settle-and-refund on finish, and the status read.
// It is safe for concurrent use.
type Service struct {
	balances BalanceStore
	ledger   Ledger
	policies PolicyStore
	sched    Scheduler
	opt      Options

	mu          sync.RWMutex
	cache       map[string]cachedPolicy
	seeding     flight // per resource and period
	policyLoads flight // per resource
}

type cachedPolicy struct {
	p       Policy
	expires time.Time
	per     Period // the last period computed for p; zero until then
}

// NewService wires a Service to its stores.
func NewService(b BalanceStore, l Ledger, p PolicyStore, s Scheduler, opt Options) *Service {
	if opt.PolicyCacheTTL <= 0 {
		opt.PolicyCacheTTL = 2 * time.Second
	}
	if opt.FinishedRetention <= 0 {
		opt.FinishedRetention = 24 * time.Hour
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.NewSessionID == nil {
		opt.NewSessionID = randomID
	}
	return &Service{balances: b, ledger: l, policies: p, sched: s, opt: opt, cache: make(map[string]cachedPolicy)}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

func validateSessionID(id string) error {
	if id == "" {
		return invalid("sessionId", "is required")
	}
	if !idRE.MatchString(id) {
		return invalid("sessionId", "must be 1 to 64 characters of [A-Za-z0-9_.:-]")
	}
	return nil
}

var clientRE = regexp.MustCompile(`^[A-Za-z0-9_.:@/-]{1,128}$`)

// ValidateClientID checks a client id: 1 to 128 characters of
// [A-Za-z0-9_.:@/-]. It returns a *ValidationError for field "clientId".
// API keys are bound to client ids by the same rule.
func ValidateClientID(id string) error {
	if !clientRE.MatchString(id) {
		return invalid("clientId", "must be 1 to 128 characters of [A-Za-z0-9_.:@/-]")
	}
	return nil
}

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
}

// ApplyResponse is the answer to an apply. When Exhausted is true nothing was
// granted or changed, and NextResetAt (zero if never) says when the period ends.
type ApplyResponse struct {
	SessionID                string
	Granted                  int64
	Remaining                int64
	LeaseExpiresAt           time.Time
	HeartbeatIntervalSeconds int64
	Replayed                 bool
	Exhausted                bool
	NextResetAt              time.Time
	QuotaType                QuotaType
	// FailOpen: granted by a FailMode OPEN policy while the stores could not
	// decide; Remaining is −1 (unknown). FailOpenRecorded says whether the
	// ledger row was written; FailOpenCause is the backend error.
	FailOpen         bool
	FailOpenRecorded bool
	FailOpenCause    error
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
// (Exhausted) changes nothing. A repeated SessionID returns the first answer
// and charges once.
//
// Errors: *ValidationError, ErrResourceNotFound, ErrSessionConflict (the
// session id exists with another resource, amount or client), ErrUnavailable
// (a backend failed; any reservation made was given back).
func (s *Service) Apply(ctx context.Context, req ApplyRequest) (ApplyResponse, error) {
	if err := req.validate(); err != nil {
		return ApplyResponse{}, err
	}
	pol, err := s.Policy(ctx, req.ResourceName)
	if err != nil {
		return ApplyResponse{}, err
	}
	per, err := s.periodAt(pol, s.opt.Now())
	if err != nil {
		return ApplyResponse{}, fmt.Errorf("apply %s: %w", req.ResourceName, err)
	}
	cmd := ApplyCmd{
		ResourceName: req.ResourceName,
		SessionID:    req.SessionID,
		ClientID:     req.ClientID,
		Amount:       req.Amount,
		MinAmount:    req.MinAmount,
		Period:       per,
		Lease:        pol.LeaseDuration(),
		FirstPeriod:  per.Start.Equal(pol.PeriodAnchor()),
	}
	if cmd.SessionID == "" {
		cmd.SessionID = s.opt.NewSessionID()
	}
	resp, err := s.apply(ctx, pol, cmd)
	if err != nil && pol.FailMode == FailOpen && isBackendFailure(err) {
		return s.failOpen(ctx, pol, cmd, err), nil
	}
	if err == nil && resp.Exhausted && req.SessionID != "" {
		// Redis no longer holds the session (past QC_FINISHED_RETENTION, or
		// lost), so it took a repeat for a new apply and refused it. If the
		// ledger has the session, this is a repeat: answer it as one.
		if row, lerr := s.ledger.Session(ctx, cmd.SessionID); lerr == nil {
			if !sameApply(row, cmd) {
				return ApplyResponse{}, fmt.Errorf("apply %s: session %s: %w", cmd.ResourceName, cmd.SessionID, ErrSessionConflict)
			}
			return ledgerReplay(pol, row, resp.Remaining), nil
		}
	}
	return resp, err
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
	return ApplyResponse{
		SessionID: row.SessionID, Granted: row.GrantedAmount, Remaining: remaining,
		LeaseExpiresAt:           row.StartTime.Add(pol.LeaseDuration()),
		HeartbeatIntervalSeconds: pol.HeartbeatIntervalSeconds(),
		Replayed:                 true, QuotaType: pol.QuotaType,
	}
}

// isBackendFailure reports whether err means the center could not decide.
func isBackendFailure(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCircuitOpen)
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
	recorded := s.ledger.InsertSession(lctx, rec) == nil
	return ApplyResponse{
		SessionID: cmd.SessionID, Granted: cmd.Amount, Remaining: -1,
		LeaseExpiresAt: now.Add(pol.LeaseDuration()), HeartbeatIntervalSeconds: pol.HeartbeatIntervalSeconds(),
		QuotaType: pol.QuotaType, FailOpen: true, FailOpenRecorded: recorded, FailOpenCause: cause,
	}
}

// apply runs the check-and-reserve loop across period roll-over and seeding.
func (s *Service) apply(ctx context.Context, pol Policy, cmd ApplyCmd) (ApplyResponse, error) {
	for range maxAttempts {
		res, err := s.balances.Apply(ctx, cmd)
		if err != nil {
			return ApplyResponse{}, fmt.Errorf("apply %s: %w", cmd.ResourceName, err)
		}
		switch res.Outcome {
		case ApplyWrongPeriod:
			if cmd.Period, err = s.sched.PeriodAt(pol, res.Now); err != nil {
				return ApplyResponse{}, fmt.Errorf("apply %s: %w", cmd.ResourceName, err)
			}
			cmd.FirstPeriod = cmd.Period.Start.Equal(pol.PeriodAnchor())
			continue
		case ApplyNeedBalance:
			if err := s.seed(ctx, pol, cmd.Period); err != nil {
				return ApplyResponse{}, fmt.Errorf("apply %s: %w", cmd.ResourceName, err)
			}
			continue
		case ApplyExhausted:
			return ApplyResponse{
				Exhausted: true, Remaining: res.Remaining, NextResetAt: cmd.Period.End,
				QuotaType: pol.QuotaType,
			}, nil
		case ApplyGranted, ApplyReplayed:
			return s.record(ctx, pol, cmd, res)
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: unknown store outcome %d", cmd.ResourceName, res.Outcome)
	}
	return ApplyResponse{}, fmt.Errorf("apply %s: period or balance kept changing: %w", cmd.ResourceName, ErrUnavailable)
}

// record writes the ledger row of a granted (or replayed) apply. A replay
// writes it too, idempotently: the first request may still be writing it,
// and a replay must not answer before the row is durable.
func (s *Service) record(ctx context.Context, pol Policy, cmd ApplyCmd, res ApplyResult) (ApplyResponse, error) {
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
	resp := ApplyResponse{
		SessionID:                cmd.SessionID,
		Granted:                  res.Granted,
		Remaining:                res.Remaining,
		LeaseExpiresAt:           res.LeaseExpiresAt,
		HeartbeatIntervalSeconds: pol.HeartbeatIntervalSeconds(),
		Replayed:                 res.Outcome == ApplyReplayed,
		QuotaType:                pol.QuotaType,
	}
	err := s.ledger.InsertSession(ctx, rec)
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
			// If the row did land after all, the cancelled session's
			// tombstone lets reconciliation settle it with nothing charged.
			s.cancel(cmd.ResourceName, cmd.SessionID)
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: record session: %w", cmd.ResourceName, err)
	}
	// The id is in the ledger already: the same session (a replay whose first
	// request wrote it, or one whose Redis state expired) or another one.
	row, gerr := s.ledger.Session(ctx, cmd.SessionID)
	if gerr != nil {
		if res.Outcome == ApplyGranted {
			s.cancel(cmd.ResourceName, cmd.SessionID)
		}
		return ApplyResponse{}, fmt.Errorf("apply %s: read session: %w", cmd.ResourceName, gerr)
	}
	same := sameApply(row, cmd)
	if res.Outcome == ApplyReplayed && same {
		return resp, nil
	}
	if same && row.Status == StatusUsing && row.GrantedAmount == res.Granted &&
		row.PeriodStart.Equal(res.PeriodStart) {
		// The row is this session's: an earlier attempt wrote it but lost the
		// answer, and its reservation was given back (or Redis lost it). The
		// fresh reservation makes the two stores agree again: keep it.
		return resp, nil
	}
	// A fresh reservation collided with an older row: give it back and answer
	// from the ledger (a replay) or refuse (another session's id).
	s.cancel(cmd.ResourceName, cmd.SessionID)
	if !same {
		return ApplyResponse{}, fmt.Errorf("apply %s: session %s: %w", cmd.ResourceName, cmd.SessionID, ErrSessionConflict)
	}
	remaining := res.Remaining
	if res.Outcome == ApplyGranted {
		remaining += res.Granted // the reservation just given back
	}
	return ledgerReplay(pol, row, remaining), nil
}

// markFailOpen flags a kept fail-open reservation, on its own deadline.
func (s *Service) markFailOpen(ctx context.Context, cmd ApplyCmd) error {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	return s.balances.MarkFailOpen(mctx, cmd.ResourceName, cmd.SessionID)
}

// landed reports whether rec's row is in the ledger after an insert whose
// outcome is unknown. It asks once, on its own short deadline.
func (s *Service) landed(ctx context.Context, rec UsageRecord) bool {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	row, err := s.ledger.Session(lctx, rec.SessionID)
	return err == nil && row.ResourceName == rec.ResourceName && row.Status == StatusUsing &&
		row.GrantedAmount == rec.GrantedAmount && row.PeriodStart.Equal(rec.PeriodStart)
}

// restoreSession brings back an open session that Redis lost: when the
// current period has no balance, by seeding it (which restores every open
// session of the resource from the ledger); else this one session, whose
// reservation the balance already holds (it was reserved before the loss,
// or the balance was rebuilt from the ledger, where the row is USING).
func (s *Service) restoreSession(ctx context.Context, pol Policy, row UsageRecord) error {
	per, err := s.periodAt(pol, s.opt.Now())
	if err != nil {
		return err
	}
	bal, err := s.balances.Balance(ctx, pol.ResourceName, per)
	if err != nil {
		return err
	}
	if !bal.Exists {
		return s.seed(ctx, pol, per)
	}
	return s.balances.RestoreSessions(ctx, pol.ResourceName, []UsageRecord{row}, pol.LeaseDuration())
}

// owns reports whether caller (a client id, "" = any) may use a session of
// owner.
func owns(caller, owner string) bool { return caller == "" || caller == owner }

// cancel gives back a reservation whose ledger row could not be written. It
// runs on its own deadline: the request's context may be the reason.
func (s *Service) cancel(resource, sessionID string) {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	// If this fails too, the reservation stays until the sweeper finds its
	// lease expired; the caller got an error, so it is never used.
	_ = s.balances.Cancel(ctx, resource, sessionID)
}

// seedLockTTL bounds how long one instance may hold a period's seeding lock;
// a holder that died is replaced after it.
const seedLockTTL = 10 * time.Second

// seed writes a period's balance from the ledger if it is not in the store:
// at the start of every period, and after Redis lost its state (restart,
// flush, eviction). The balance is limit − charged − reserved of the
// period's ledger rows, and the resource's open sessions come back with it.
// Within an instance one caller per period does the work (the rest wait for
// it); across instances a Redis lock lets one seed while the others wait for
// its balance. The seed script writes only an absent balance, so a balance
// is never reset to the full limit or counted twice.
func (s *Service) seed(ctx context.Context, pol Policy, per Period) error {
	key := pol.ResourceName + "@" + strconv.FormatInt(per.ID(), 10)
	err := s.seeding.do(key, func() error {
		// Shared by every waiter: not bound to the first caller's
		// cancellation, but to the seeding lock's lifetime.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), seedLockTTL)
		defer cancel()
		return s.seedOnce(sctx, pol, per)
	})
	if err != nil {
		return fmt.Errorf("seed period %d: %w", per.ID(), err)
	}
	return nil
}

func (s *Service) seedOnce(ctx context.Context, pol Policy, per Period) error {
	lock := "seed:" + strconv.FormatInt(per.ID(), 10)
	token, err := s.balances.TryLock(ctx, pol.ResourceName, lock, seedLockTTL)
	if err != nil {
		return err
	}
	if token == "" {
		return s.awaitBalance(ctx, pol.ResourceName, per)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.balances.Unlock(uctx, pol.ResourceName, lock, token) // expires anyway
	}()
	totals, err := s.ledger.PeriodTotals(ctx, pol.ResourceName, per.Start)
	if err != nil {
		return err
	}
	open, err := s.ledger.OpenSessions(ctx, pol.ResourceName)
	if err != nil {
		return err
	}
	_, err = s.balances.Seed(ctx, pol.ResourceName, per, pol.TotalLimit, totals, open, pol.LeaseDuration())
	return err
}

// awaitBalance waits while another instance seeds the period.
func (s *Service) awaitBalance(ctx context.Context, resource string, per Period) error {
	deadline := time.Now().Add(seedLockTTL)
	for {
		bal, err := s.balances.Balance(ctx, resource, per)
		if err != nil {
			return err
		}
		if bal.Exists {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("balance of %s is being rebuilt by another instance: %w", resource, ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// flight runs one call per key at a time; concurrent callers with the same
// key wait for it and share its error.
type flight struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	err  error
}

func (f *flight) do(key string, fn func() error) error {
	f.mu.Lock()
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		<-c.done
		return c.err
	}
	if f.calls == nil {
		f.calls = make(map[string]*flightCall)
	}
	c := &flightCall{done: make(chan struct{}), err: errFlightPanicked}
	f.calls[key] = c
	f.mu.Unlock()
	// Deferred so that waiters are released even if fn panics (the panic
	// goes on up this goroutine; they get errFlightPanicked).
	defer func() {
		f.mu.Lock()
		delete(f.calls, key)
		f.mu.Unlock()
		close(c.done)
	}()
	c.err = fn()
	return c.err
}

// errFlightPanicked is what waiters of a shared call get when it panicked.
var errFlightPanicked = errors.New("shared call panicked")

// HeartbeatResponse carries the renewed lease.
type HeartbeatResponse struct {
	SessionID      string
	Status         Status
	LeaseExpiresAt time.Time
}

// Heartbeat renews a USING session's lease to now + leakThresholdSeconds
// (store clock). It touches the BalanceStore only. A clientID other than ""
// (set when API keys are on) must own the session.
//
// Errors: *ValidationError, ErrResourceNotFound, ErrSessionNotFound (also when
// the session belongs to another resource), *NotActiveError (FINISHED or
// LEAKED), ErrUnavailable.
func (s *Service) Heartbeat(ctx context.Context, resource, sessionID, clientID string) (HeartbeatResponse, error) {
	if err := ValidateResourceName(resource); err != nil {
		return HeartbeatResponse{}, err
	}
	if err := validateSessionID(sessionID); err != nil {
		return HeartbeatResponse{}, err
	}
	pol, err := s.Policy(ctx, resource)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	exp, err := s.balances.Heartbeat(ctx, resource, sessionID, clientID, pol.LeaseDuration())
	if errors.Is(err, ErrSessionNotFound) {
		// Past its retention in the store a settled session is known to the
		// ledger only; it is still not active.
		row, lerr := s.ledger.Session(ctx, sessionID)
		if lerr == nil && row.ResourceName == resource && owns(clientID, row.ClientID) {
			if row.Status != StatusUsing {
				return HeartbeatResponse{}, &NotActiveError{SessionID: sessionID, Status: row.Status}
			}
			// Open in the ledger but gone from Redis (Redis lost its state):
			// bring it back now and renew it.
			if rerr := s.restoreSession(ctx, pol, row); rerr == nil {
				exp, err = s.balances.Heartbeat(ctx, resource, sessionID, clientID, pol.LeaseDuration())
				if err == nil {
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

// FinishRequest reports a session's real usage, in the policy's unit.
type FinishRequest struct {
	ResourceName string
	SessionID    string
	ClientID     string // the caller's client when API keys are on; "" = any
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
// Errors: *ValidationError, ErrResourceNotFound, ErrSessionNotFound,
// ErrSessionConflict (a repeat with another actualUsedAmount), ErrUnavailable
// (the ledger could not be written; a retry completes it).
func (s *Service) Finish(ctx context.Context, req FinishRequest) (FinishResponse, error) {
	if err := ValidateResourceName(req.ResourceName); err != nil {
		return FinishResponse{}, err
	}
	if err := validateSessionID(req.SessionID); err != nil {
		return FinishResponse{}, err
	}
	if err := ValidateAmount("actualUsedAmount", req.Actual, true); err != nil {
		return FinishResponse{}, err
	}
	pol, err := s.Policy(ctx, req.ResourceName)
	if err != nil {
		return FinishResponse{}, err
	}
	res, err := s.balances.Finish(ctx, FinishCmd{
		ResourceName: req.ResourceName, SessionID: req.SessionID, ClientID: req.ClientID,
		Actual: req.Actual, Retention: s.opt.FinishedRetention,
	})
	if errors.Is(err, ErrSessionNotFound) {
		return s.finishFromLedger(ctx, pol, req)
	}
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	return s.settle(ctx, pol, req, res)
}

// settle writes the ledger side of a finish the BalanceStore did (or
// replayed) and builds the answer.
func (s *Service) settle(ctx context.Context, pol Policy, req FinishRequest, res FinishResult) (FinishResponse, error) {
	rec := UsageRecord{
		ResourceName:   req.ResourceName,
		ClientID:       res.ClientID,
		SessionID:      req.SessionID,
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
	// Always settle the row, also on a replay: the first finish may have
	// settled Redis and then failed to reach the ledger.
	if err := s.ledger.FinishSession(ctx, rec); err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: record: %w", req.ResourceName, err)
	}
	return FinishResponse{
		SessionID: req.SessionID, Granted: res.Granted, Charged: res.Charged,
		Refunded: res.Refunded, Overage: res.Overage, Remaining: res.Remaining,
		Replayed: res.Replayed, WasLeaked: res.WasLeaked, QuotaType: pol.QuotaType,
	}, nil
}

// finishFromLedger answers a finish for a session the BalanceStore no longer
// holds: a repeat after its retention is answered from the ledger row.
func (s *Service) finishFromLedger(ctx context.Context, pol Policy, req FinishRequest) (FinishResponse, error) {
	row, err := s.ledger.Session(ctx, req.SessionID)
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	if row.ResourceName != req.ResourceName || !owns(req.ClientID, row.ClientID) {
		return FinishResponse{}, fmt.Errorf("finish %s: session %s: %w", req.ResourceName, req.SessionID, ErrSessionNotFound)
	}
	if row.Status == StatusLeaked {
		// Swept, and past the retention in which a late finish may true it up.
		return FinishResponse{}, &NotActiveError{SessionID: req.SessionID, Status: row.Status}
	}
	if row.Status == StatusUsing {
		// The row is open but Redis lost the session: bring it back (with
		// the period's balance, if that is gone too) and settle it there.
		if err := s.restoreSession(ctx, pol, row); err != nil {
			return FinishResponse{}, fmt.Errorf("finish %s: restore session %s: %w", req.ResourceName, req.SessionID, err)
		}
		res, err := s.balances.Finish(ctx, FinishCmd{
			ResourceName: req.ResourceName, SessionID: req.SessionID, ClientID: req.ClientID,
			Actual: req.Actual, Retention: s.opt.FinishedRetention,
		})
		if err == nil {
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
	bal, err := s.balances.Balance(ctx, req.ResourceName, per)
	if err != nil {
		return FinishResponse{}, fmt.Errorf("finish %s: %w", req.ResourceName, err)
	}
	return FinishResponse{
		SessionID: req.SessionID, Granted: row.GrantedAmount, Charged: row.ChargedAmount,
		Refunded: row.RefundedAmount, Overage: row.OverageAmount, Remaining: bal.Remaining(),
		Replayed: true, WasLeaked: row.LeakRecovered, QuotaType: pol.QuotaType,
	}, nil
}

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
	per, err := s.periodAt(pol, s.opt.Now())
	if err != nil {
		return StatusResponse{}, fmt.Errorf("status %s: %w", resource, err)
	}
	bal, err := s.balances.Balance(ctx, resource, per)
	if err == nil && !bal.Exists {
		if err = s.seed(ctx, pol, per); err == nil {
			bal, err = s.balances.Balance(ctx, resource, per)
		}
	}
	if err != nil {
		return StatusResponse{}, fmt.Errorf("status %s: %w", resource, err)
	}
	pol.TotalLimit = bal.Limit
	return StatusResponse{
		Policy: pol, Used: bal.Charged, Reserved: bal.Reserved, Remaining: bal.Remaining(),
		ActiveSessions: bal.ActiveSessions, Period: per,
	}, nil
}

// Policy returns a resource's policy, from a short-lived cache; while MySQL
// is unavailable an expired entry is still used. Errors:
// ErrResourceNotFound, ErrUnavailable.
//
// Concurrent misses of one resource share one read: a cold cache under load
// sends one query to MySQL, not one per request.
func (s *Service) Policy(ctx context.Context, resource string) (Policy, error) {
	if p, fresh, ok := s.cachedPolicy(resource); ok && fresh {
		return p, nil
	}
	err := s.policyLoads.do(resource, func() error {
		// Shared by every waiter: not bound to the first caller's
		// cancellation (the store's query timeout bounds it).
		p, err := s.policies.GetPolicy(context.WithoutCancel(ctx), resource)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.cache[resource] = cachedPolicy{p: p, expires: time.Now().Add(s.opt.PolicyCacheTTL)}
		s.mu.Unlock()
		return nil
	})
	p, _, ok := s.cachedPolicy(resource)
	switch {
	case err == nil && ok:
		return p, nil
	case err != nil && ok && isBackendFailure(err):
		// Stale beats unknown while MySQL is down: limits live in Redis,
		// and a fail-open policy must still be known to fail open.
		return p, nil
	case err == nil:
		// A PUT dropped the entry just after the load: read it again.
		return s.policies.GetPolicy(ctx, resource)
	}
	return Policy{}, err
}

// periodAt is sched.PeriodAt with the last answer per policy remembered:
// a cron period is computed once per period (tens of microseconds for some
// expressions), not once per request.
func (s *Service) periodAt(pol Policy, now time.Time) (Period, error) {
	s.mu.RLock()
	c, ok := s.cache[pol.ResourceName]
	s.mu.RUnlock()
	if ok && c.p == pol && !c.per.Start.IsZero() && c.per.Contains(now) {
		return c.per, nil
	}
	per, err := s.sched.PeriodAt(pol, now)
	if err != nil {
		return per, err
	}
	s.mu.Lock()
	if c, ok := s.cache[pol.ResourceName]; ok && c.p == pol {
		c.per = per
		s.cache[pol.ResourceName] = c
	}
	s.mu.Unlock()
	return per, nil
}

// cachedPolicy returns the cached policy, whether it is still fresh, and
// whether there is one at all.
func (s *Service) cachedPolicy(resource string) (Policy, bool, bool) {
	s.mu.RLock()
	c, ok := s.cache[resource]
	s.mu.RUnlock()
	return c.p, ok && time.Now().Before(c.expires), ok
}

// Policies lists every policy, sorted by name.
func (s *Service) Policies(ctx context.Context) ([]Policy, error) {
	ps, err := s.policies.ListPolicies(ctx)
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	return ps, nil
}

// PutPolicy validates and stores a policy (create or update), then sets its
// limit in the BalanceStore so the change applies to the current period at
// once: remaining moves by the difference, usage stays. Defaults: timezone
// UTC, leakThresholdSeconds 300. With an audit log, the change is recorded
// (actor from ActorFrom(ctx), the policy before and after) once it is stored.
//
// Errors: *ValidationError, ErrUnavailable (the policy may be stored but the
// limit not yet live, or the change not yet audited: retry the same PUT,
// which stores the same policy and audits it again).
func (s *Service) PutPolicy(ctx context.Context, p Policy) (Policy, bool, error) {
	if p.Timezone == "" {
		p.Timezone = "UTC"
	}
	if p.LeakThresholdSeconds == 0 {
		p.LeakThresholdSeconds = DefaultLeakThresholdSeconds
	}
	p.FailMode = p.FailMode.OrDefault()
	if err := s.ValidatePolicy(p); err != nil {
		return Policy{}, false, err
	}
	now := s.opt.Now().UTC().Truncate(time.Millisecond)
	p.CreatedAt, p.UpdatedAt = now, now
	audit, err := s.policyAudit(ctx, p.ResourceName, now)
	if err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	stored, created, err := s.policies.PutPolicy(ctx, p)
	if err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	if err := audit(stored, created); err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	s.mu.Lock()
	delete(s.cache, p.ResourceName)
	s.mu.Unlock()
	if err := s.balances.SetLimit(ctx, p.ResourceName, p.TotalLimit); err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: set limit: %w", p.ResourceName, err)
	}
	return stored, created, nil
}

// ValidatePolicy checks every field of a policy; it returns the first
// *ValidationError.
func (s *Service) ValidatePolicy(p Policy) error {
	if err := ValidateResourceName(p.ResourceName); err != nil {
		return err
	}
	if !p.QuotaType.Valid() {
		return invalid("quotaType", "must be one of DURATION, COUNT, TOKENS, BANDWIDTH")
	}
	if err := ValidateAmount("totalLimit", p.TotalLimit, false); err != nil {
		return err
	}
	if m := p.FailMode.OrDefault(); m != FailClosed && m != FailOpen {
		return invalid("failMode", "must be CLOSED or OPEN")
	}
	if p.LeakThresholdSeconds < 1 || p.LeakThresholdSeconds > MaxLeakThresholdSeconds {
		return invalid("leakThresholdSeconds", fmt.Sprintf("must be 1 to %d seconds", MaxLeakThresholdSeconds))
	}
	return s.sched.Validate(p.ResetCron, p.Timezone)
}
