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
// visit instead of every policy (issue 23 §1): the active resources of
// the tracker and their policies, read in one query per 500 stale names
// and kept for activePolicyTTL. Its ListPolicies serves the sweeper, the
// reconciler and the pool controller, Active the failover watcher,
// Policies (the used resources) and Status the balance collector.
type activeSet struct {
	tr     *activity.Tracker
	store  policyReader
	status func(ctx context.Context, resource string) (quota.StatusResponse, error)
	now    func() time.Time

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

// ListPolicies lists the active resources' policies, sorted by name; an
// active name without a policy (deleted) is left out. Errors: the
// tracker's when it knows no resource, the store's.
func (a *activeSet) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	names, err := a.tr.Active(ctx)
	if err != nil && len(names) == 0 {
		return nil, err
	}
	return a.policiesOf(ctx, names, true)
}

// UsedPolicies is ListPolicies for the resources used, not only changed
// (activity.Tracker.Used): what the balance readers visit, since reading
// an unused resource's balance seeds it (a burst of new policies would
// seed every one of them).
func (a *activeSet) UsedPolicies(ctx context.Context) ([]quota.Policy, error) {
	names, err := a.tr.Used(ctx)
	if err != nil && len(names) == 0 {
		return nil, err
	}
	return a.policiesOf(ctx, names, false)
}

// policiesOf reads names' policies, reusing those read within
// activePolicyTTL; prune drops the kept policies of other names (names is
// then every active resource).
func (a *activeSet) policiesOf(ctx context.Context, names []string, prune bool) ([]quota.Policy, error) {
	now := a.now()
	var err error
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
	if prune {
		a.pols = keep // idle resources' policies are not kept
	}
	return out, nil
}

// Policies is UsedPolicies (httpapi.StatusSource: the balance gauges).
func (a *activeSet) Policies(ctx context.Context) ([]quota.Policy, error) { return a.UsedPolicies(ctx) }

// Status is the service's status of resource (httpapi.StatusSource).
func (a *activeSet) Status(ctx context.Context, resource string) (quota.StatusResponse, error) {
	return a.status(ctx, resource)
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
// the per-resource series of the resources no longer active (forget: the
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

// retainSeries deletes the series of the resources that are not active; it
// deletes nothing when the active set cannot be read (Redis down).
func retainSeries(ctx context.Context, a *activeSet, m *httpapi.Metrics, log *zap.Logger, forget ...func(resource string)) {
	names, err := a.tr.Active(ctx)
	if err != nil {
		log.Debug("active resources not read: idle series kept until the next pass", zap.Error(err))
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
// limited to the active resources: an idle resource has no pool decision
// to make.
type activePools struct {
	poolctl.Policies
	active *activeSet
}

func (p activePools) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	return p.active.ListPolicies(ctx)
}
