package quota

import (
	"context"
	"sync"
	"time"
)

// stubs implements BalanceStore, Ledger and PolicyStore in process for the
// domain's own tests: each method calls its func field when set, else
// answers as a healthy, empty store would (see each method), and every call
// is counted by method name. Tests set the funcs that steer the path they
// pin down.
type stubs struct {
	mu    sync.Mutex
	calls map[string]int

	apply        func(ApplyCmd) (ApplyResult, error)
	cancel       func(resource, id string) error
	markFailOpen func(resource, id string) error
	heartbeat    func(resource, id, client string, lease time.Duration) (time.Time, error)
	finish       func(FinishCmd) (FinishResult, error)
	balance      func(resource string, per Period) (Balance, error)
	seed         func(resource string, per Period, limit int64, t PeriodTotals, open []UsageRecord) (bool, error)
	restore      func(resource string, open []UsageRecord) error
	tryLock      func(resource, name string) (string, error)
	unlock       func(resource, name, token string) error
	setLimit     func(resource string, limit int64) error

	insert       func(UsageRecord) error
	finishRow    func(UsageRecord) error
	session      func(id string) (UsageRecord, error)
	periodTotals func(resource string, start time.Time) (PeriodTotals, error)
	openPage     func(resource string, after int64, limit int) ([]UsageRecord, int64, error)

	getPolicy    func(resource string) (Policy, error)
	listPolicies func() ([]Policy, error)
	putPolicy    func(Policy) (Policy, bool, error)
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

// Apply: default granted in full, remaining 100.
func (s *stubs) Apply(_ context.Context, c ApplyCmd) (ApplyResult, error) {
	s.count("Apply")
	if s.apply != nil {
		return s.apply(c)
	}
	return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, Remaining: 100, PeriodStart: c.Period.Start}, nil
}

func (s *stubs) Cancel(_ context.Context, resource, id string) error {
	s.count("Cancel")
	if s.cancel != nil {
		return s.cancel(resource, id)
	}
	return nil
}

func (s *stubs) MarkFailOpen(_ context.Context, resource, id string) error {
	s.count("MarkFailOpen")
	if s.markFailOpen != nil {
		return s.markFailOpen(resource, id)
	}
	return nil
}

// Heartbeat: default ErrSessionNotFound.
func (s *stubs) Heartbeat(_ context.Context, resource, id, client string, lease time.Duration) (time.Time, error) {
	s.count("Heartbeat")
	if s.heartbeat != nil {
		return s.heartbeat(resource, id, client, lease)
	}
	return time.Time{}, ErrSessionNotFound
}

// Finish: default ErrSessionNotFound.
func (s *stubs) Finish(_ context.Context, c FinishCmd) (FinishResult, error) {
	s.count("Finish")
	if s.finish != nil {
		return s.finish(c)
	}
	return FinishResult{}, ErrSessionNotFound
}

// Balance: default an existing, empty balance with limit 100.
func (s *stubs) Balance(_ context.Context, resource string, per Period) (Balance, error) {
	s.count("Balance")
	if s.balance != nil {
		return s.balance(resource, per)
	}
	return Balance{Exists: true, Limit: 100}, nil
}

func (s *stubs) Seed(_ context.Context, resource string, per Period, limit int64, t PeriodTotals, open []UsageRecord, _ time.Duration) (bool, error) {
	s.count("Seed")
	if s.seed != nil {
		return s.seed(resource, per, limit, t, open)
	}
	return true, nil
}

func (s *stubs) RestoreLeaked(context.Context, string, UsageRecord, time.Duration) error {
	s.count("RestoreLeaked")
	return nil
}

func (s *stubs) RestoreSessions(_ context.Context, resource string, open []UsageRecord, _ time.Duration) error {
	s.count("RestoreSessions")
	if s.restore != nil {
		return s.restore(resource, open)
	}
	return nil
}

// TryLock: default the lock is free (token "t").
func (s *stubs) TryLock(_ context.Context, resource, name string, _ time.Duration) (string, error) {
	s.count("TryLock")
	if s.tryLock != nil {
		return s.tryLock(resource, name)
	}
	return "t", nil
}

func (s *stubs) RenewLock(context.Context, string, string, string, time.Duration) (bool, error) {
	s.count("RenewLock")
	return true, nil
}

func (s *stubs) Unlock(_ context.Context, resource, name, token string) error {
	s.count("Unlock")
	if s.unlock != nil {
		return s.unlock(resource, name, token)
	}
	return nil
}

func (s *stubs) SetLimit(_ context.Context, resource string, limit int64) error {
	s.count("SetLimit")
	if s.setLimit != nil {
		return s.setLimit(resource, limit)
	}
	return nil
}

func (s *stubs) InsertSession(_ context.Context, rec UsageRecord) error {
	s.count("InsertSession")
	if s.insert != nil {
		return s.insert(rec)
	}
	return nil
}

func (s *stubs) FinishSession(_ context.Context, rec UsageRecord) error {
	s.count("FinishSession")
	if s.finishRow != nil {
		return s.finishRow(rec)
	}
	return nil
}

// Session: default ErrSessionNotFound.
func (s *stubs) Session(_ context.Context, id string) (UsageRecord, error) {
	s.count("Session")
	if s.session != nil {
		return s.session(id)
	}
	return UsageRecord{}, ErrSessionNotFound
}

func (s *stubs) PeriodTotals(_ context.Context, resource string, start time.Time) (PeriodTotals, error) {
	s.count("PeriodTotals")
	if s.periodTotals != nil {
		return s.periodTotals(resource, start)
	}
	return PeriodTotals{}, nil
}

// OpenSessionsPage: default no open sessions.
func (s *stubs) OpenSessionsPage(_ context.Context, resource string, after int64, limit int) ([]UsageRecord, int64, error) {
	s.count("OpenSessionsPage")
	if s.openPage != nil {
		return s.openPage(resource, after, limit)
	}
	return nil, after, nil
}

// GetPolicy: default testPolicy for any resource.
func (s *stubs) GetPolicy(_ context.Context, resource string) (Policy, error) {
	s.count("GetPolicy")
	if s.getPolicy != nil {
		return s.getPolicy(resource)
	}
	p := testPolicy
	p.ResourceName = resource
	return p, nil
}

func (s *stubs) ListPolicies(context.Context) ([]Policy, error) {
	s.count("ListPolicies")
	if s.listPolicies != nil {
		return s.listPolicies()
	}
	return nil, nil
}

func (s *stubs) PutPolicy(_ context.Context, p Policy) (Policy, bool, error) {
	s.count("PutPolicy")
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
