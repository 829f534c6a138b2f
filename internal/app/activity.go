package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/quota"
)

// touching is the domain service with every use of a resource recorded as
// activity (internal/activity): apply, heartbeat, finish and charge, each
// with the lease it granted. A Touch costs no Redis command; a request
// refused for an unknown resource or a bad field records nothing.
type touching struct {
	*quota.Service
	act *activity.Tracker
}

// used says whether a request answered with err used its resource.
func used(err error) bool {
	if err == nil {
		return true // before errors.As, whose target would escape per call
	}
	var ve *quota.ValidationError
	return !errors.Is(err, quota.ErrResourceNotFound) && !errors.As(err, &ve)
}

func (t touching) Apply(ctx context.Context, req quota.ApplyRequest) (quota.ApplyResponse, error) {
	resp, err := t.Service.Apply(ctx, req)
	if used(err) {
		t.act.Touch(req.ResourceName, resp.LeaseExpiresAt)
	}
	return resp, err
}

func (t touching) Heartbeat(ctx context.Context, resource, sessionID, clientID string) (quota.HeartbeatResponse, error) {
	resp, err := t.Service.Heartbeat(ctx, resource, sessionID, clientID)
	if used(err) {
		t.act.Touch(resource, resp.LeaseExpiresAt)
	}
	return resp, err
}

func (t touching) Finish(ctx context.Context, req quota.FinishRequest) (quota.FinishResponse, error) {
	resp, err := t.Service.Finish(ctx, req)
	if used(err) {
		t.act.Touch(req.ResourceName, time.Time{})
	}
	return resp, err
}

func (t touching) Charge(ctx context.Context, req quota.ChargeRequest) (quota.ChargeResponse, error) {
	resp, err := t.Service.Charge(ctx, req)
	if used(err) {
		for _, it := range req.Items {
			t.act.Touch(it.ResourceName, time.Time{})
		}
	}
	return resp, err
}

// policyReader is what activeSet reads of the policy store
// (*mysqlstore.Store).
type policyReader interface {
	GetPolicy(ctx context.Context, resource string) (quota.Policy, error)
	PoliciesOf(ctx context.Context, resources []string) (map[string]quota.Policy, error)
}

// activePolicyTTL is how long activeSet reuses a policy it read; a change
// announced on the policy bus drops it at once (forget).
const activePolicyTTL = 30 * time.Second

// activeSet is what the background loops and the scrape-time collectors
// visit instead of every policy (issue 23 §1): the used resources of the
// tracker and their policies, read in one query per 500 stale names and
// kept for activePolicyTTL. Its ListPolicies serves the sweeper, the
// reconciler, the pool controller and the burn-rate sampler, Policies and
// Status the balance collector; Active (the used and the changed
// resources) the failover watcher.
type activeSet struct {
	tr     *activity.Tracker
	store  policyReader
	status func(ctx context.Context, resource string) (quota.StatusResponse, error)
	// prefetch, when set, batches the statuses a scrape is about to read
	// (httpapi.Prefetcher; in serve, scrapeStatus.Prefetch).
	prefetch func(ctx context.Context, names []string)
	now      func() time.Time

	mu   sync.Mutex
	pols map[string]activePolicy
}

type activePolicy struct {
	p    quota.Policy
	read time.Time
}

func newActiveSet(tr *activity.Tracker, store policyReader, svc *quota.Service) *activeSet {
	return &activeSet{tr: tr, store: store, status: svc.Status, now: time.Now, pols: map[string]activePolicy{}}
}

// Active lists the active resources' names (failover.Active).
func (a *activeSet) Active(ctx context.Context) ([]string, error) { return a.tr.Active(ctx) }

// ListPolicies lists the policies of the resources used within the
// window (activity.Tracker.Used: an apply, heartbeat, finish or charge, or
// a lease not run out), sorted by name; a name without a policy (deleted)
// is left out. A resource only changed is not listed: it has no session
// to sweep or reconcile, and reading its balance would seed it (100,000
// policies created in a burst seeded every balance, and the catch-ups of
// the seeds opened the Redis breaker; their series took 2.5 GB). Errors:
// the tracker's when it knows no resource, the store's.
func (a *activeSet) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	names, err := a.tr.Used(ctx)
	if err != nil && len(names) == 0 {
		return nil, err
	}
	now := a.now()
	var stale []string
	a.mu.Lock()
	for _, r := range names {
		if c, ok := a.pols[r]; !ok || now.Sub(c.read) >= activePolicyTTL {
			stale = append(stale, r)
		}
	}
	a.mu.Unlock()
	var fresh map[string]quota.Policy
	if len(stale) > 0 {
		if fresh, err = a.store.PoliciesOf(ctx, stale); err != nil {
			return nil, err
		}
	}
	out := make([]quota.Policy, 0, len(names))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range stale {
		if p, ok := fresh[r]; ok {
			a.pols[r] = activePolicy{p: p, read: now}
		} else {
			delete(a.pols, r)
		}
	}
	keep := make(map[string]activePolicy, len(names))
	for _, r := range names {
		if c, ok := a.pols[r]; ok {
			keep[r] = c
			out = append(out, c.p)
		}
	}
	a.pols = keep // idle resources' policies are not kept
	return out, nil
}

// Policies is ListPolicies (httpapi.StatusSource: the balance gauges).
func (a *activeSet) Policies(ctx context.Context) ([]quota.Policy, error) { return a.ListPolicies(ctx) }

// Status is the service's status of resource (httpapi.StatusSource; in
// serve, the scrape's shared read, scrapeStatus).
func (a *activeSet) Status(ctx context.Context, resource string) (quota.StatusResponse, error) {
	return a.status(ctx, resource)
}

// Prefetch reads the statuses of names in one batch for the Status calls
// that follow (httpapi.Prefetcher); without a prefetch it does nothing.
func (a *activeSet) Prefetch(ctx context.Context, names []string) {
	if a.prefetch != nil {
		a.prefetch(ctx, names)
	}
}

// GetPolicy reads resource's policy from the store (reconcile.Policies).
func (a *activeSet) GetPolicy(ctx context.Context, resource string) (quota.Policy, error) {
	return a.store.GetPolicy(ctx, resource)
}

// Policy is GetPolicy (failover.Policies).
func (a *activeSet) Policy(ctx context.Context, resource string) (quota.Policy, error) {
	return a.store.GetPolicy(ctx, resource)
}

// forget drops what activeSet kept of resource (a change announced on the
// policy bus).
func (a *activeSet) forget(resource string) {
	a.mu.Lock()
	delete(a.pols, resource)
	a.mu.Unlock()
}

// retainSeriesEvery is how often the series of idle resources are deleted.
const retainSeriesEvery = time.Minute

// activityLoop writes this instance's touches to the shared active set
// every second (activity.Tracker.Run) and, every retainSeriesEvery, deletes
// the per-resource series of the resources no longer used (forget: the
// other packages' series of those resources). It returns nil when ctx ends.
func activityLoop(a *activeSet, m *httpapi.Metrics, log *zap.Logger, forget ...func(resource string)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = a.tr.Run(ctx)
		}()
		t := time.NewTicker(retainSeriesEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				<-done
				return nil
			case <-t.C:
			}
			retainSeries(ctx, a, m, log, forget...)
		}
	}
}

// retainSeries deletes the series of the resources not used within the
// window (those of a resource only changed, made at 0 by its PUT, too); it
// deletes nothing when the set cannot be read (Redis down).
func retainSeries(ctx context.Context, a *activeSet, m *httpapi.Metrics, log *zap.Logger, forget ...func(resource string)) {
	names, err := a.tr.Used(ctx)
	if err != nil {
		log.Debug("used resources not read: idle series kept until the next pass", zap.Error(err))
		return
	}
	active := make(map[string]bool, len(names))
	for _, r := range names {
		active[r] = true
	}
	for _, r := range m.Retain(func(r string) bool { return active[r] }) {
		for _, f := range forget {
			f(r)
		}
	}
}

// activePools is the pool controller's policy store with ListPolicies
// limited to the used resources: an idle resource has no pool decision to
// make.
type activePools struct {
	poolctl.Policies
	active *activeSet
}

func (p activePools) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	return p.active.ListPolicies(ctx)
}
