package quota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// stubs implements BalanceStore, Ledger and PolicyStore in process for the
// domain's own tests: each method calls its func field when set, else
// answers as a healthy, empty store would (see each method), and every call
// is counted by method name. Tests set the funcs that steer the path they
// pin down.
type stubs struct {
	mu      sync.Mutex
	stored  map[string]Policy // by the default PutPolicy: GetPolicy's answer, as a store's
	calls   map[string]int
	lockTTL time.Duration // of the last TryLock

	apply         func(ApplyCmd) (ApplyResult, error)
	cancel        func(resource, id string) error
	compensate    func(resource, id, attempt string) (CompensateOutcome, error)
	markFailOpen  func(resource, id string) error
	heartbeat     func(resource, id, client string, lease time.Duration) (time.Time, error)
	finish        func(FinishCmd) (FinishResult, error)
	balance       func(resource string, per Period) (Balance, error)
	seed          func(resource string, per Period, limit int64, t PeriodTotals, open []UsageRecord) (bool, error)
	restore       func(resource string, open []UsageRecord) error
	restoreLeaked func(resource string, row UsageRecord) error
	tryLock       func(resource, name string) (string, error)
	unlock        func(resource, name, token string) error
	setLimit      func(resource string, limit int64) error

	insert       func(UsageRecord) error
	finishRow    func(UsageRecord) error
	cancelRow    func(UsageRecord) error
	reviveRow    func(UsageRecord) (bool, error)
	session      func(id string) (UsageRecord, error)
	periodTotals func(resource string, start time.Time) (PeriodTotals, error)
	openPage     func(resource string, after int64, limit int) ([]UsageRecord, int64, error)

	// The pools' parts (PoolConfig.PoolTotals, PoolBalances): these
	// errors, else empty totals and written.
	poolTotalsErr, seedPoolsErr, poolLayoutErr error
	poolLayoutCuts                             []pools.Cut // what SetPoolLayout reports cut back

	getPolicy    func(resource string) (Policy, error)
	listPolicies func() ([]Policy, error)
	putPolicy    func(Policy) (Policy, bool, error)
}

// enter counts a call and fails it, as a real store would, when its
// context is done: the error matches ErrUnavailable.
func (s *stubs) enter(ctx context.Context, name string) error {
	s.count(name)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w: %w", name, ErrUnavailable, err)
	}
	return nil
}

func (s *stubs) count(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[name]++
}

// n is how many times the method was called.
func (s *stubs) n(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[name]
}

// Apply: default granted in full (from the limit), remaining 100.
func (s *stubs) Apply(ctx context.Context, c ApplyCmd) (ApplyResult, error) {
	if err := s.enter(ctx, "Apply"); err != nil {
		return ApplyResult{}, err
	}
	if s.apply != nil {
		return s.apply(c)
	}
	return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, Remaining: 100, PeriodStart: c.Period.Start, Drawn: PoolSplit{Base: c.Amount}}, nil
}

func (s *stubs) Cancel(ctx context.Context, resource, id string) error {
	if err := s.enter(ctx, "Cancel"); err != nil {
		return err
	}
	if s.cancel != nil {
		return s.cancel(resource, id)
	}
	return nil
}

// Compensate: default nothing there (CompensateAbsent).
func (s *stubs) Compensate(ctx context.Context, resource, id, attempt string) (CompensateOutcome, error) {
	if err := s.enter(ctx, "Compensate"); err != nil {
		return 0, err
	}
	if s.compensate != nil {
		return s.compensate(resource, id, attempt)
	}
	return CompensateAbsent, nil
}

func (s *stubs) ScopeFailOpen(ctx context.Context, resource, id, scoped, client string) (bool, error) {
	if err := s.enter(ctx, "ScopeFailOpen"); err != nil {
		return false, err
	}
	return false, nil
}

func (s *stubs) MarkFailOpen(ctx context.Context, resource, id string) error {
	if err := s.enter(ctx, "MarkFailOpen"); err != nil {
		return err
	}
	if s.markFailOpen != nil {
		return s.markFailOpen(resource, id)
	}
	return nil
}

// Heartbeat: default ErrSessionNotFound.
func (s *stubs) Heartbeat(ctx context.Context, resource, id, client string, lease time.Duration) (time.Time, error) {
	if err := s.enter(ctx, "Heartbeat"); err != nil {
		return time.Time{}, err
	}
	if s.heartbeat != nil {
		return s.heartbeat(resource, id, client, lease)
	}
	return time.Time{}, ErrSessionNotFound
}

// Finish: default ErrSessionNotFound.
func (s *stubs) Finish(ctx context.Context, c FinishCmd) (FinishResult, error) {
	if err := s.enter(ctx, "Finish"); err != nil {
		return FinishResult{}, err
	}
	if s.finish != nil {
		return s.finish(c)
	}
	return FinishResult{}, ErrSessionNotFound
}

// Balance: default an existing, empty balance with limit 100.
func (s *stubs) Balance(ctx context.Context, resource string, per Period) (Balance, error) {
	if err := s.enter(ctx, "Balance"); err != nil {
		return Balance{}, err
	}
	if s.balance != nil {
		return s.balance(resource, per)
	}
	return Balance{Exists: true, Limit: 100}, nil
}

func (s *stubs) SeedFenced(ctx context.Context, _ Fence, resource string, per Period, limit int64, t PeriodTotals, open []UsageRecord, _ time.Duration) (bool, error) {
	if err := s.enter(ctx, "Seed"); err != nil {
		return false, err
	}
	if s.seed != nil {
		return s.seed(resource, per, limit, t, open)
	}
	return true, nil
}

// CatchUp restores as RestoreSessions does (through restore, when set):
// the stub keeps no balance to count in.
func (s *stubs) CatchUp(ctx context.Context, _ Fence, resource string, _ Period, open []UsageRecord, _ time.Duration) error {
	if err := s.enter(ctx, "CatchUp"); err != nil {
		return err
	}
	if s.restore != nil {
		return s.restore(resource, open)
	}
	return nil
}

func (s *stubs) RestoreLeaked(ctx context.Context, resource string, row UsageRecord, _ time.Duration) error {
	if err := s.enter(ctx, "RestoreLeaked"); err != nil {
		return err
	}
	if s.restoreLeaked != nil {
		return s.restoreLeaked(resource, row)
	}
	return nil
}

func (s *stubs) RestoreSessions(ctx context.Context, resource string, open []UsageRecord, _ time.Duration) error {
	if err := s.enter(ctx, "RestoreSessions"); err != nil {
		return err
	}
	if s.restore != nil {
		return s.restore(resource, open)
	}
	return nil
}

// TryLock: default the lock is free (token "t").
func (s *stubs) TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error) {
	if err := s.enter(ctx, "TryLock"); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.lockTTL = ttl
	s.mu.Unlock()
	if s.tryLock != nil {
		return s.tryLock(resource, name)
	}
	return "t", nil
}

func (s *stubs) RenewLock(ctx context.Context, _, _, _ string, _ time.Duration) (bool, error) {
	if err := s.enter(ctx, "RenewLock"); err != nil {
		return false, err
	}
	return true, nil
}

func (s *stubs) Unlock(ctx context.Context, resource, name, token string) error {
	if err := s.enter(ctx, "Unlock"); err != nil {
		return err
	}
	if s.unlock != nil {
		return s.unlock(resource, name, token)
	}
	return nil
}

func (s *stubs) SetLimit(ctx context.Context, resource string, limit int64) error {
	if err := s.enter(ctx, "SetLimit"); err != nil {
		return err
	}
	if s.setLimit != nil {
		return s.setLimit(resource, limit)
	}
	return nil
}

func (s *stubs) InsertSession(ctx context.Context, rec UsageRecord) error {
	if err := s.enter(ctx, "InsertSession"); err != nil {
		return err
	}
	if s.insert != nil {
		return s.insert(rec)
	}
	return nil
}

func (s *stubs) FinishSession(ctx context.Context, rec UsageRecord) error {
	if err := s.enter(ctx, "FinishSession"); err != nil {
		return err
	}
	if s.finishRow != nil {
		return s.finishRow(rec)
	}
	return nil
}

func (s *stubs) CancelSession(ctx context.Context, rec UsageRecord) error {
	if err := s.enter(ctx, "CancelSession"); err != nil {
		return err
	}
	if s.cancelRow != nil {
		return s.cancelRow(rec)
	}
	return nil
}

// ReviveSession: default true (the row is the retry's).
func (s *stubs) ReviveSession(ctx context.Context, rec UsageRecord) (bool, error) {
	if err := s.enter(ctx, "ReviveSession"); err != nil {
		return false, err
	}
	if s.reviveRow != nil {
		return s.reviveRow(rec)
	}
	return true, nil
}

// Session: default ErrSessionNotFound.
func (s *stubs) Session(ctx context.Context, id string) (UsageRecord, error) {
	if err := s.enter(ctx, "Session"); err != nil {
		return UsageRecord{}, err
	}
	if s.session != nil {
		return s.session(id)
	}
	return UsageRecord{}, ErrSessionNotFound
}

func (s *stubs) PoolTotals(ctx context.Context, resource string, start time.Time) (pools.Totals, error) {
	if err := s.enter(ctx, "PoolTotals"); err != nil {
		return pools.Totals{}, err
	}
	return pools.Totals{}, s.poolTotalsErr
}

func (s *stubs) SpareMoves(context.Context, string) ([]string, error) { return nil, nil }

func (s *stubs) ForgetSpareMoves(context.Context, string, []string) error { return nil }

func (s *stubs) SeedPools(ctx context.Context, resource string, per Period, t pools.Totals) (bool, error) {
	if err := s.enter(ctx, "SeedPools"); err != nil {
		return false, err
	}
	return s.seedPoolsErr == nil, s.seedPoolsErr
}

func (s *stubs) SetPoolLayout(ctx context.Context, resource string, lay pools.Layout, moves *pools.Moves) (bool, []pools.Cut, error) {
	if err := s.enter(ctx, "SetPoolLayout"); err != nil {
		return false, nil, err
	}
	return s.poolLayoutErr == nil, s.poolLayoutCuts, s.poolLayoutErr // the store had a layout: written
}

func (s *stubs) RestoreGrants(ctx context.Context, resource string, gs []pools.Grant, open []pools.OpenDraw) (bool, error) {
	if err := s.enter(ctx, "RestoreGrants"); err != nil {
		return false, err
	}
	return true, nil
}

func (s *stubs) PeriodTotals(ctx context.Context, resource string, start time.Time) (PeriodTotals, error) {
	if err := s.enter(ctx, "PeriodTotals"); err != nil {
		return PeriodTotals{}, err
	}
	if s.periodTotals != nil {
		return s.periodTotals(resource, start)
	}
	return PeriodTotals{}, nil
}

// OpenSessionsPage: default no open sessions.
func (s *stubs) OpenSessionsPage(ctx context.Context, resource string, after int64, limit int) ([]UsageRecord, int64, error) {
	if err := s.enter(ctx, "OpenSessionsPage"); err != nil {
		return nil, 0, err
	}
	if s.openPage != nil {
		return s.openPage(resource, after, limit)
	}
	return nil, after, nil
}

// GetPolicy: default testPolicy for any resource.
func (s *stubs) GetPolicy(ctx context.Context, resource string) (Policy, error) {
	if err := s.enter(ctx, "GetPolicy"); err != nil {
		return Policy{}, err
	}
	if s.getPolicy != nil {
		return s.getPolicy(resource)
	}
	s.mu.Lock()
	stored, ok := s.stored[resource]
	s.mu.Unlock()
	if ok {
		return stored, nil
	}
	p := testPolicy
	p.ResourceName = resource
	return p, nil
}

func (s *stubs) ListPolicies(ctx context.Context) ([]Policy, error) {
	if err := s.enter(ctx, "ListPolicies"); err != nil {
		return nil, err
	}
	if s.listPolicies != nil {
		return s.listPolicies()
	}
	return nil, nil
}

func (s *stubs) PutPolicy(ctx context.Context, p Policy) (Policy, bool, error) {
	if err := s.enter(ctx, "PutPolicy"); err != nil {
		return Policy{}, false, err
	}
	if s.putPolicy != nil {
		out, created, err := s.putPolicy(p)
		if err == nil {
			s.remember(out)
		}
		return out, created, err
	}
	s.remember(p)
	return p, true, nil
}

// remember keeps p as GetPolicy's answer for its resource.
func (s *stubs) remember(p Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stored == nil {
		s.stored = map[string]Policy{}
	}
	s.stored[p.ResourceName] = p
}

func (s *stubs) CreatePolicy(ctx context.Context, p Policy) (Policy, bool, error) {
	if err := s.enter(ctx, "CreatePolicy"); err != nil {
		return Policy{}, false, err
	}
	if s.putPolicy != nil {
		return s.putPolicy(p)
	}
	return p, true, nil
}

// testPolicy is a daily TOKENS policy of 100 created at testEpoch.
var testPolicy = Policy{
	ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 100, ResetCron: "daily", Timezone: "UTC",
	LeakThresholdSeconds: 30, FailMode: FailClosed, CreatedAt: testEpoch, UpdatedAt: testEpoch,
}

// testEpoch is where the tests' clock starts.
var testEpoch = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

// daySched is a Scheduler of whole UTC days (any cron) from testEpoch;
// Validate refuses the timezone "Bad/Zone".
type daySched struct{}

func (daySched) Validate(cron, tz string) error {
	if tz == "Bad/Zone" {
		return invalid("timezone", "unknown")
	}
	return nil
}

func (daySched) PeriodAt(p Policy, t time.Time) (Period, error) {
	if p.ResetCron == "" {
		return Period{Start: p.CreatedAt.UTC().Truncate(time.Millisecond)}, nil
	}
	start := t.UTC().Truncate(24 * time.Hour)
	return Period{Start: start, End: start.Add(24 * time.Hour)}, nil
}

// newStubService is a Service on st with a fixed clock at testEpoch + 1h
// and session ids "gen-1", "gen-2", …
func newStubService(st *stubs, opt Options) *Service {
	if opt.Now == nil {
		opt.Now = func() time.Time { return testEpoch.Add(time.Hour) }
	}
	if opt.NewSessionID == nil {
		var mu sync.Mutex
		n := 0
		opt.NewSessionID = func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return "gen-" + string(rune('0'+n))
		}
	}
	return NewService(st, st, st, daySched{}, opt)
}
