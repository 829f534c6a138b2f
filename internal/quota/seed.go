package quota

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// seedLockTTL is the TTL of a period's seeding lock. Its holder renews it
// every third of it while it works (KeepLock), so a holder that died is
// replaced within it by an instance waiting for the balance (issue 11 §3.4:
// it was 10 s, past the callers' deadlines).
const seedLockTTL = 3 * time.Second

// seedTimeout bounds one seeding, waiting for another seeder included.
const seedTimeout = 10 * time.Second

// seedPage is how many open sessions seeding reads from the ledger and
// restores at a time.
const seedPage = 500

// awaitPoll is how often an instance waiting for another one's seeding
// reads the balance.
const awaitPoll = 20 * time.Millisecond

// seed writes a period's balance from the ledger if it is not in the store:
// at the start of every period, and after Redis lost its state (restart,
// flush, eviction). The balance is limit − charged − reserved of the
// period's ledger rows, and the resource's open sessions come back with it;
// for a resource with pools, its pool configuration and the period's pool
// counters follow in the same step (seedPools), so every caller of seed
// (an apply, a restore, the catch-up) gets both.
// Within an instance one caller per period does the work (the rest wait for
// it and share its error); across instances a Redis lock lets one seed while
// the others wait for its balance. The seed script writes only an absent
// balance, so a balance is never reset to the full limit or counted twice.
func (s *Service) seed(ctx context.Context, pol Policy, per Period) error {
	key := pol.ResourceName + "@" + strconv.FormatInt(per.ID(), 10)
	_, err, _ := s.seeding.Do(key, func() (any, error) {
		// Shared by every waiter: not bound to the first caller's
		// cancellation, but to the seeding lock's lifetime.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), seedTimeout)
		defer cancel()
		if err := s.seedOnce(sctx, pol, per); err != nil {
			return nil, err
		}
		return nil, s.seedPools(sctx, pol, per)
	})
	if err != nil {
		return fmt.Errorf("seed period %d: %w", per.ID(), err)
	}
	return nil
}

// seedOnce seeds the period under its lock, or waits for the instance that
// holds it; if that holder dies (its lock expires without a balance), the
// waiter takes the lock over and seeds.
func (s *Service) seedOnce(ctx context.Context, pol Policy, per Period) error {
	lock := "seed:" + strconv.FormatInt(per.ID(), 10)
	for {
		token, err := Guard(s.redisFor(pol.ResourceName), func() (string, error) {
			return s.balances.TryLock(ctx, pol.ResourceName, lock, seedLockTTL)
		})
		if err != nil {
			return err
		}
		if token != "" {
			err := s.seedHolding(ctx, pol, per, lock, token)
			if errors.Is(err, ErrLockLost) {
				// The lock expired while this seeder worked (cut off from
				// Redis past its TTL) and its write was refused: another
				// instance may be seeding. Start over: wait for its balance
				// or take the lock again.
				continue
			}
			return err
		}
		if seeded, err := s.awaitBalance(ctx, pol.ResourceName, per, seedLockTTL/3); err != nil || seeded {
			return err
		}
	}
}

// seedHolding seeds the period while holding its lock (token), renewing it.
func (s *Service) seedHolding(ctx context.Context, pol Policy, per Period, lock, token string) error {
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		// Not through the breaker: releasing a lock is cleanup, and an open
		// breaker would keep it held until it expires (it expires anyway).
		_ = s.balances.Unlock(uctx, pol.ResourceName, lock, token)
	}()
	ctx, stop := KeepLock(ctx, s.balances, s.redis, pol.ResourceName, lock, token, seedLockTTL)
	defer stop()
	totals, open, snapshot, err := s.seedReads(ctx, pol, per)
	if err != nil {
		// A read cut short because the lock was lost meanwhile is
		// ErrLockLost (the caller starts over), not a backend failure: a
		// bare context.Canceled from the ledger answered 500.
		return LockLost(ctx, err)
	}
	wrote, err := Guard(s.redisFor(pol.ResourceName), func() (bool, error) {
		return s.balances.SeedFenced(ctx, Fence{Name: lock, Token: token}, pol.ResourceName, per, pol.TotalLimit, totals, open, pol.LeaseDuration())
	})
	if err == nil && wrote && snapshot {
		s.catchUpLater(pol, per, open)
	}
	return LockLost(ctx, err) // not written: another seeder won and restored the sessions
}

// seedReads reads what a rebuild of the period writes: its totals and every
// open session of the resource. Every page of open sessions goes to the one
// fenced seed call, which restores them in chunks under the balance's new
// epoch (seed.lua): the rebuilt balance counts each of them, so a give-back
// of one of them takes it from this balance, and of any other session takes
// nothing. With a SnapshotLedger the reads are one consistent snapshot
// (snapshot true), which the catch-up after the rebuild relies on.
func (s *Service) seedReads(ctx context.Context, pol Policy, per Period) (PeriodTotals, []UsageRecord, bool, error) {
	if sl, ok := s.ledger.(SnapshotLedger); ok {
		var totals PeriodTotals
		var open []UsageRecord
		err := GuardErr(s.mysql, func() (err error) {
			totals, open, err = sl.SeedSnapshot(ctx, pol.ResourceName, per.Start)
			return err
		})
		return totals, open, true, err
	}
	totals, err := Guard(s.mysql, func() (PeriodTotals, error) {
		return s.ledger.PeriodTotals(ctx, pol.ResourceName, per.Start)
	})
	if err != nil {
		return totals, nil, false, err
	}
	var open []UsageRecord
	for after := int64(0); ; {
		page, next, err := s.openSessions(ctx, pol.ResourceName, after)
		if err != nil {
			return totals, nil, false, err
		}
		open, after = append(open, page...), next
		if len(page) < seedPage {
			return totals, open, false, nil
		}
	}
}

// openSessions reads one page of a resource's open ledger rows.
func (s *Service) openSessions(ctx context.Context, resource string, after int64) ([]UsageRecord, int64, error) {
	var rows []UsageRecord
	err := GuardErr(s.mysql, func() (err error) {
		rows, after, err = s.ledger.OpenSessionsPage(ctx, resource, after, seedPage)
		return err
	})
	return rows, after, err
}

// awaitBalance waits up to d while another instance seeds the period. It
// reports whether the balance is there; false after d means the seeding
// lock is to be tried again (its holder may have died).
func (s *Service) awaitBalance(ctx context.Context, resource string, per Period, d time.Duration) (bool, error) {
	deadline := s.opt.Now().Add(d)
	for {
		bal, err := s.balance(ctx, resource, per)
		if err != nil {
			return false, err
		}
		if bal.Exists {
			return true, nil
		}
		if s.opt.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("balance of %s is being rebuilt by another instance: %w", resource, ErrUnavailable)
		case <-time.After(awaitPoll):
		}
	}
}

// restoreSession brings back an open session that Redis lost: when the
// current period has no balance, by seeding it (which restores every open
// session of the resource from the ledger and counts its reservation).
// Else the balance may not count this session: a failMode OPEN apply
// granted while Redis was unreachable has a row but never reserved in the
// balance that was there before the outage, and an apply whose row landed
// after a rebuild's snapshot is not in the rebuilt totals. So a session of
// the balance's period is restored in the catch-up mode (seed.lua "c"): a
// missing session is restored and its grant counted once, keyed by the
// balance's epoch; one the balance counts is left alone. A balance without
// an epoch (written before epochs) is left to reconciliation: nothing is
// restored and the caller answers 503 until it has run. A pools' session,
// or one of another period, is restored as before, without touching the
// balance (reconciliation corrects a drift it leaves).
func (s *Service) restoreSession(ctx context.Context, pol Policy, row UsageRecord) error {
	per, err := s.policies.periodAt(pol, s.opt.Now())
	if err != nil {
		return err
	}
	bal, err := s.balance(ctx, pol.ResourceName, per)
	if err != nil {
		return err
	}
	if !bal.Exists {
		return s.seed(ctx, pol, per)
	}
	if row.PeriodStart.Equal(per.Start) && !row.PoolSession() {
		return GuardErr(s.redisFor(pol.ResourceName), func() error {
			return s.balances.CatchUp(ctx, Fence{}, pol.ResourceName, per, []UsageRecord{row}, pol.LeaseDuration())
		})
	}
	return GuardErr(s.redisFor(pol.ResourceName), func() error {
		return s.balances.RestoreSessions(ctx, pol.ResourceName, []UsageRecord{row}, pol.LeaseDuration())
	})
}
