package admin

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// ErrInUse: the change would reinterpret or orphan what is in use (changing
// quotaType while the period has usage, deleting a policy with live
// sessions); nothing was changed (HTTP 409 POLICY_IN_USE).
var ErrInUse = quota.NewError(quota.CodePolicyInUse, "policy in use")

// ErrBadCursor: a cursor that this deployment did not issue, that was
// altered, or that belongs to another query (HTTP 400 INVALID_ARGUMENT).
var ErrBadCursor = errors.New("invalid cursor")

// Quota is what this package uses of the domain service (*quota.Service).
type Quota interface {
	Policy(ctx context.Context, resource string) (quota.Policy, error)
	Policies(ctx context.Context) ([]quota.Policy, error)
	Status(ctx context.Context, resource string) (quota.StatusResponse, error)
	PutPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error)
	CreatePolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error)
	Finish(ctx context.Context, req quota.FinishRequest) (quota.FinishResponse, error)
	ForgetPolicy(resource string)
}

// Live is what this package reads and writes in Redis (*redisstore.Store).
type Live interface {
	LiveSessions(ctx context.Context, resource string, after quota.LivePos, count int) ([]quota.LiveSession, quota.LivePos, bool, error)
	LiveCount(ctx context.Context, resource string) (int64, error)
	SetLimit(ctx context.Context, resource string, limit int64) error
	RecordBurn(ctx context.Context, resource string, s quota.BurnSample, keep time.Duration) error
	BurnSamples(ctx context.Context, resource string, since time.Time) ([]quota.BurnSample, error)
	SharedSecret(ctx context.Context, name string, size int) ([]byte, error)
}

// Ledger is what this package reads and changes in MySQL (*mysqlstore.Store).
type Ledger interface {
	Session(ctx context.Context, sessionID string) (quota.UsageRecord, error)
	SessionHistory(ctx context.Context, q quota.HistoryQuery) (quota.HistoryPage, error)
	Usage(ctx context.Context, q quota.UsageQuery) (quota.UsageResult, error)
	GetPolicy(ctx context.Context, resource string) (quota.Policy, error)
	ResetPeriod(ctx context.Context, resource string, at time.Time) (quota.Policy, error)
	DeletePolicy(ctx context.Context, resource string) error
}

// Deps wires a Service.
type Deps struct {
	Quota  Quota
	Live   Live
	Ledger Ledger
	Audit  quota.AuditLog // nil: actions are not audited
	Sched  quota.Scheduler
	Now    func() time.Time // default time.Now
	// Active lists the policies of the used resources (internal/activity),
	// the only ones the burn-rate sampler and the forecast metrics visit;
	// nil: every policy (Quota.Policies). An idle resource then has no
	// samples: its forecast reads "unknown", and nothing is consumed.
	Active func(ctx context.Context) ([]quota.Policy, error)
	// SampleVisits, when set, makes the burn-rate sampler skip the
	// resources nothing changed since their last sample (activity.Visits,
	// issue 23 §1; see Service.sampleChanged). nil: every resource is
	// read and sampled each tick.
	SampleVisits Visits
	// SampleStatuses, when set, is the sampler's read of the statuses
	// of the resources a tick samples (with SampleVisits: the due ones),
	// the i-th result resources[i]'s; nil: Quota.Status of each, one at a
	// time. quota-center serve reads them in one batch and keeps them for
	// the scrape's balance and forecast gauges (issue 23 §1: one status
	// read per change, or per full visit, serves both).
	SampleStatuses func(ctx context.Context, resources []string) []quota.StatusResult
}

// Service answers the operators' reads and carries out their actions. It
// is safe for concurrent use.
type Service struct {
	d Deps

	keyMu sync.Mutex
	key   []byte // cursor signing key, read once from Redis

	memo sampleMemo // the sampler's last samples (SampleVisits)
}

// New returns a Service on d.
func New(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{d: d}
}

// now is the service clock in UTC at millisecond precision.
func (s *Service) now() time.Time { return s.d.Now().UTC().Truncate(time.Millisecond) }

// Policies lists every policy (for the console).
func (s *Service) Policies(ctx context.Context) ([]quota.Policy, error) {
	return s.d.Quota.Policies(ctx)
}

// sampled lists the policies the sampler and the forecast metrics visit:
// Deps.Active's, or every policy.
func (s *Service) sampled(ctx context.Context) ([]quota.Policy, error) {
	if s.d.Active != nil {
		return s.d.Active(ctx)
	}
	return s.d.Quota.Policies(ctx)
}

// Policy reads one policy, fresh from the ledger (not the service's cache).
// Errors: *quota.ValidationError, quota.ErrResourceNotFound,
// quota.ErrUnavailable.
func (s *Service) Policy(ctx context.Context, resource string) (quota.Policy, error) {
	if err := quota.ValidateResourceName(resource); err != nil {
		return quota.Policy{}, err
	}
	return s.d.Ledger.GetPolicy(ctx, resource)
}
