package admin

import (
	"context"
	"errors"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// PoolLedger is everything the pools' administration and controller
// (internal/poolctl) use of the policy store and ledger (MySQL): PoolStore
// and the list of policies (a sum of roles, as PoolStore is).
type PoolLedger interface {
	PoolStore
	ListPolicies(ctx context.Context) ([]quota.Policy, error)
}

// PoolLocks is the controller's lock in the balance store (Redis).
type PoolLocks interface {
	TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error)
	RenewLock(ctx context.Context, resource, name, token string, ttl time.Duration) (bool, error)
	Unlock(ctx context.Context, resource, name, token string) error
}

// PoolRedis is everything the pools' administration and controller use of
// the balance store (Redis): PoolLive and PoolLocks.
type PoolRedis interface {
	PoolLive
	PoolLocks
	quota.SpareNotes // the controller's drain of the spare buffer's moves
}

// GuardPools returns l and s behind the backend breakers (quota.Guard, as
// the Service, the sweeper and reconciliation call their stores): every
// call of the pools' administration and of the controller counts towards,
// and is refused by, the breaker of its backend (the quota Service guards
// its own pools' calls). Unlock goes straight through (releasing a lock is
// cleanup; it expires anyway). s's calls meet the breaker of their
// resource (quota.ForResource: on a Redis Cluster, that of the master
// serving it).
func GuardPools(l PoolLedger, s PoolRedis, b quota.Breakers) (PoolLedger, PoolRedis) {
	return guardedLedger{l: l, b: b.Ledger}, guardedLive{s: s, b: b.Balances}
}

type guardedLedger struct {
	l PoolLedger
	b quota.Breaker
}

func (g guardedLedger) GetPolicy(ctx context.Context, resource string) (quota.Policy, error) {
	return quota.Guard(g.b, func() (quota.Policy, error) { return g.l.GetPolicy(ctx, resource) })
}

func (g guardedLedger) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	return quota.Guard(g.b, func() ([]quota.Policy, error) { return g.l.ListPolicies(ctx) })
}

func (g guardedLedger) Lines(ctx context.Context, resource string) ([]pools.LineSpec, error) {
	return quota.Guard(g.b, func() ([]pools.LineSpec, error) { return g.l.Lines(ctx, resource) })
}

// ChangePools counts towards the ledger's breaker what the store answers,
// not decide's refusal nor then's failure (then writes Redis: its errors
// are its breaker's, met inside then).
func (g guardedLedger) ChangePools(ctx context.Context, resource string, since int64, at time.Time,
	decide func(pools.State) (pools.Change, error), then func() error) (bool, error) {
	var created, theirs bool
	var err error
	d := func(st pools.State) (pools.Change, error) {
		ch, err := decide(st)
		theirs = err != nil
		return ch, err
	}
	var t func() error
	if then != nil {
		t = func() error {
			err := then()
			theirs = err != nil
			return err
		}
	}
	_, gerr := quota.Guard(g.b, func() (struct{}, error) {
		created, err = g.l.ChangePools(ctx, resource, since, at, d, t)
		if theirs {
			return struct{}{}, nil
		}
		return struct{}{}, err
	})
	if gerr != nil {
		return false, gerr
	}
	return created, err
}

func (g guardedLedger) OpenLineSessions(ctx context.Context, resource, line string) (int64, error) {
	return quota.Guard(g.b, func() (int64, error) { return g.l.OpenLineSessions(ctx, resource, line) })
}

func (g guardedLedger) PoolSettings(ctx context.Context, resource string) (pools.Settings, bool, error) {
	var ok bool
	s, err := quota.Guard(g.b, func() (s pools.Settings, err error) {
		s, ok, err = g.l.PoolSettings(ctx, resource)
		return s, err
	})
	return s, ok, err
}

func (g guardedLedger) PutPoolSettings(ctx context.Context, resource string, s pools.Settings, at time.Time) error {
	return quota.GuardErr(g.b, func() error { return g.l.PutPoolSettings(ctx, resource, s, at) })
}

func (g guardedLedger) Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error) {
	return quota.Guard(g.b, func() ([]pools.GrantRecord, error) { return g.l.Grants(ctx, resource, since) })
}

func (g guardedLedger) InsertGrant(ctx context.Context, resource string, r pools.GrantRecord) error {
	return quota.GuardErr(g.b, func() error { return g.l.InsertGrant(ctx, resource, r) })
}

func (g guardedLedger) VoidGrant(ctx context.Context, resource, id string, at int64) error {
	return quota.GuardErr(g.b, func() error { return g.l.VoidGrant(ctx, resource, id, at) })
}

func (g guardedLedger) Reclaims(ctx context.Context, resource string, limit int) ([]pools.Reclaim, error) {
	return quota.Guard(g.b, func() ([]pools.Reclaim, error) { return g.l.Reclaims(ctx, resource, limit) })
}

func (g guardedLedger) PutReclaim(ctx context.Context, resource string, r pools.Reclaim) error {
	return quota.GuardErr(g.b, func() error { return g.l.PutReclaim(ctx, resource, r) })
}

func (g guardedLedger) PoolEvents(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error) {
	return quota.Guard(g.b, func() ([]pools.PoolEvent, error) { return g.l.PoolEvents(ctx, resource, limit) })
}

func (g guardedLedger) RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error {
	return quota.GuardErr(g.b, func() error { return g.l.RecordPoolEvents(ctx, resource, evs) })
}

func (g guardedLedger) RecordAudit(ctx context.Context, e quota.AuditEntry) error {
	return quota.GuardErr(g.b, func() error { return g.l.RecordAudit(ctx, e) })
}

func (g guardedLedger) LineReserved(ctx context.Context, resource string, periodStart time.Time) (map[string]int64, error) {
	return quota.Guard(g.b, func() (map[string]int64, error) { return g.l.LineReserved(ctx, resource, periodStart) })
}

type guardedLive struct {
	s PoolRedis
	b quota.Breaker
}

func (g guardedLive) SpareMoves(ctx context.Context, resource string) ([]string, error) {
	return quota.Guard(quota.ForResource(g.b, resource), func() ([]string, error) { return g.s.SpareMoves(ctx, resource) })
}

func (g guardedLive) ForgetSpareMoves(ctx context.Context, resource string, refs []string) error {
	return quota.GuardErr(quota.ForResource(g.b, resource), func() error { return g.s.ForgetSpareMoves(ctx, resource, refs) })
}

func (g guardedLive) PutGrant(ctx context.Context, resource string, gr pools.Grant) error {
	return quota.GuardErr(quota.ForResource(g.b, resource), func() error { return g.s.PutGrant(ctx, resource, gr) })
}

func (g guardedLive) VoidGrant(ctx context.Context, resource, id string) error {
	return quota.GuardErr(quota.ForResource(g.b, resource), func() error { return g.s.VoidGrant(ctx, resource, id) })
}

func (g guardedLive) MovePools(ctx context.Context, resource string, per quota.Period, m pools.Move) (moved, free int64, err error) {
	moved, err = quota.Guard(quota.ForResource(g.b, resource), func() (n int64, err error) {
		n, free, err = g.s.MovePools(ctx, resource, per, m)
		return n, err
	})
	return moved, free, err
}

func (g guardedLive) PoolModel(ctx context.Context, resource string, per quota.Period, lay pools.Layout) (*pools.Model, error) {
	return quota.Guard(quota.ForResource(g.b, resource), func() (*pools.Model, error) { return g.s.PoolModel(ctx, resource, per, lay) })
}

func (g guardedLive) CloseLine(ctx context.Context, resource, line string, bound time.Duration) (open, mark int64, err error) {
	open, err = quota.Guard(quota.ForResource(g.b, resource), func() (n int64, err error) {
		n, mark, err = g.s.CloseLine(ctx, resource, line, bound)
		return n, err
	})
	return open, mark, err
}

func (g guardedLive) ClosingHeld(ctx context.Context, resource, line string, mark int64, drop bool) (bool, error) {
	return quota.Guard(quota.ForResource(g.b, resource), func() (bool, error) { return g.s.ClosingHeld(ctx, resource, line, mark, drop) })
}

func (g guardedLive) EndClosing(ctx context.Context, resource, line string, mark int64, deleted bool) error {
	return quota.GuardErr(quota.ForResource(g.b, resource), func() error { return g.s.EndClosing(ctx, resource, line, mark, deleted) })
}

func (g guardedLive) TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error) {
	return quota.Guard(quota.ForResource(g.b, resource), func() (string, error) { return g.s.TryLock(ctx, resource, name, ttl) })
}

func (g guardedLive) RenewLock(ctx context.Context, resource, name, token string, ttl time.Duration) (bool, error) {
	return quota.Guard(quota.ForResource(g.b, resource), func() (bool, error) { return g.s.RenewLock(ctx, resource, name, token, ttl) })
}

func (g guardedLive) Unlock(ctx context.Context, resource, name, token string) error {
	return g.s.Unlock(ctx, resource, name, token)
}

// PooledOf is the store's PooledOf behind the ledger's breaker;
// errors.ErrUnsupported when the store has none.
func (g guardedLedger) PooledOf(ctx context.Context, resources []string, since int64) (map[string]bool, error) {
	u, ok := g.l.(PoolUsers)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return quota.Guard(g.b, func() (map[string]bool, error) { return u.PooledOf(ctx, resources, since) })
}
