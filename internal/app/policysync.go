package app

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/policysync"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// announcingLedger is the ledger with every change of what the instances
// cache per resource (the policy, its period anchor, its lines, pools
// settings and grants) announced on the policy bus once it is stored, so
// that every instance's caches drop the resource at once rather than
// within the policy cache TTL, and first dropped here by forget (this
// instance's own caches, without the round trip through Redis, which may
// be down). Reads go to the store unchanged; the apply path never passes
// here.
// A change also makes the resource active (internal/activity), so that
// every instance's failover watch covers it for the active window.
type announcingLedger struct {
	*mysqlstore.Store
	bus    *policysync.Bus
	forget func(resource string)
	act    *activity.Tracker
}

func (l announcingLedger) announce(ctx context.Context, resource string, err error) error {
	if err == nil {
		l.forget(resource)
		l.act.Changed(resource)
		l.bus.Changed(ctx, resource)
	}
	return err
}

func (l announcingLedger) PutPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error) {
	out, created, err := l.Store.PutPolicy(ctx, p)
	return out, created, l.announce(ctx, p.ResourceName, err)
}

func (l announcingLedger) UpdatePolicyLocked(ctx context.Context, p quota.Policy, since int64,
	check func(pools.State) error) (quota.Policy, bool, error) {
	stored, found, err := l.Store.UpdatePolicyLocked(ctx, p, since, check)
	return stored, found, l.announce(ctx, p.ResourceName, err)
}

func (l announcingLedger) CreatePolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error) {
	out, created, err := l.Store.CreatePolicy(ctx, p)
	if err == nil && !created {
		return out, false, nil // nothing was written: nothing to announce
	}
	return out, created, l.announce(ctx, p.ResourceName, err)
}

func (l announcingLedger) ResetPeriod(ctx context.Context, resource string, at time.Time) (quota.Policy, error) {
	p, err := l.Store.ResetPeriod(ctx, resource, at)
	return p, l.announce(ctx, resource, err)
}

func (l announcingLedger) DeletePolicy(ctx context.Context, resource string) error {
	return l.announce(ctx, resource, l.Store.DeletePolicy(ctx, resource))
}

func (l announcingLedger) PutPoolSettings(ctx context.Context, resource string, ps pools.Settings, at time.Time) error {
	return l.announce(ctx, resource, l.Store.PutPoolSettings(ctx, resource, ps, at))
}

func (l announcingLedger) PutLine(ctx context.Context, resource string, spec pools.LineSpec, at time.Time) (bool, error) {
	created, err := l.Store.PutLine(ctx, resource, spec, at)
	return created, l.announce(ctx, resource, err)
}

func (l announcingLedger) DeleteLine(ctx context.Context, resource, line string) error {
	return l.announce(ctx, resource, l.Store.DeleteLine(ctx, resource, line))
}

func (l announcingLedger) ChangePools(ctx context.Context, resource string, since int64, at time.Time,
	decide func(pools.State) (pools.Change, error), then func() error) (bool, error) {
	created, err := l.Store.ChangePools(ctx, resource, since, at, decide, then)
	return created, l.announce(ctx, resource, err)
}

func (l announcingLedger) InsertGrant(ctx context.Context, resource string, g pools.GrantRecord) error {
	return l.announce(ctx, resource, l.Store.InsertGrant(ctx, resource, g))
}

func (l announcingLedger) VoidGrant(ctx context.Context, resource, id string, at int64) error {
	return l.announce(ctx, resource, l.Store.VoidGrant(ctx, resource, id, at))
}

// policyBusLoop receives the policy changes of the other instances until
// ctx ends. Not being subscribed is not fatal: the bus keeps subscribing
// in the background, and until then other instances' changes show within
// the policy cache TTL.
func policyBusLoop(bus *policysync.Bus, log *zap.Logger, ttl time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		stop, err := bus.Run(ctx)
		if err != nil {
			log.Warn("policy change bus not subscribed yet (retrying); other instances' changes show within the policy cache TTL",
				zap.Duration("policyCacheTTL", ttl), zap.Error(err))
		}
		<-ctx.Done()
		stop()
		return nil
	}
}
