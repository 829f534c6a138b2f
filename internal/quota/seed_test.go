package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// openRows are n open ledger rows of r, ids "o1" … "on".
func openRows(n int) []UsageRecord {
	rows := make([]UsageRecord, n)
	for i := range rows {
		rows[i] = UsageRecord{ResourceName: "r", SessionID: fmt.Sprintf("o%d", i+1), GrantedAmount: 1, Status: StatusUsing}
	}
	return rows
}

// pagedLedger serves rows in pages, as OpenSessionsPage does: after is the
// index of the last row returned.
func pagedLedger(rows []UsageRecord) func(string, int64, int) ([]UsageRecord, int64, error) {
	return func(_ string, after int64, limit int) ([]UsageRecord, int64, error) {
		end := min(int(after)+limit, len(rows))
		if int(after) >= end {
			return nil, after, nil
		}
		return rows[after:end], int64(end), nil
	}
}

// Seeding writes limit − charged − reserved of the period's ledger rows
// and brings back every open session, however many pages they take, under
// the period's lock, which it releases.
func TestSeedRebuildsTheBalanceAndEveryOpenSession(t *testing.T) {
	for _, n := range []int{0, 1, seedPage - 1, seedPage, seedPage + 1, 2*seedPage + 7} {
		rows := openRows(n)
		var got []UsageRecord
		var seededWith struct {
			per   Period
			limit int64
			tot   PeriodTotals
		}
		var mu sync.Mutex
		st := &stubs{
			periodTotals: func(res string, start time.Time) (PeriodTotals, error) {
				if !start.Equal(today.Start) {
					t.Errorf("totals of the period starting %v", start)
				}
				return PeriodTotals{Charged: 30, Reserved: int64(n)}, nil
			},
			openPage: pagedLedger(rows),
			seed: func(_ string, per Period, limit int64, tot PeriodTotals, open []UsageRecord) (bool, error) {
				seededWith.per, seededWith.limit, seededWith.tot = per, limit, tot
				got = append(got, open...)
				return true, nil
			},
			restore: func(_ string, open []UsageRecord) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, open...)
				return nil
			},
		}
		st.balance = func(string, Period) (Balance, error) { return Balance{Exists: st.n("Seed") > 0, Limit: 100}, nil }
		if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); err != nil {
			t.Fatalf("%d open: %v", n, err)
		}
		if seededWith.per != today || seededWith.limit != 100 || seededWith.tot != (PeriodTotals{Charged: 30, Reserved: int64(n)}) {
			t.Errorf("%d open: seeded %+v", n, seededWith)
		}
		if len(got) != n || (n > 0 && got[n-1].SessionID != rows[n-1].SessionID) {
			t.Errorf("%d open sessions, %d restored", n, len(got))
		}
		if st.n("TryLock") != 1 || st.n("Unlock") != 1 || st.lockTTL <= 0 || st.lockTTL > 3*time.Second {
			t.Errorf("%d open: %d locks (ttl %v), %d unlocks; want one lock a dead holder loses within 3 s", n, st.n("TryLock"), st.lockTTL, st.n("Unlock"))
		}
	}
}

// Another seeder won the race (the seed script wrote nothing): it restores
// the sessions, this one restores none. Every page is read before the one
// seed call, so that the store restores them all under the rebuilt
// balance's epoch.
func TestSeedLostToAnotherSeederRestoresNothing(t *testing.T) {
	st := &stubs{
		openPage: pagedLedger(openRows(seedPage + 1)),
		seed:     func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return false, nil },
	}
	// The winner's balance is there once this seeder's call found it.
	st.balance = func(string, Period) (Balance, error) { return Balance{Exists: st.n("Seed") > 0, Limit: 100}, nil }
	if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); err != nil {
		t.Fatal(err)
	}
	if st.n("OpenSessionsPage") != 2 || st.n("Seed") != 1 || st.n("RestoreSessions") != 0 {
		t.Fatalf("pages %d, seeds %d, restores %d; want 2, 1 and 0", st.n("OpenSessionsPage"), st.n("Seed"), st.n("RestoreSessions"))
	}
}

// Every failing step fails the seeding, and the lock is released all the
// same.
func TestSeedFailures(t *testing.T) {
	fail := func(st *stubs) { st.balance = func(string, Period) (Balance, error) { return Balance{}, nil } }
	for name, set := range map[string]func(*stubs){
		"lock": func(st *stubs) { st.tryLock = func(string, string) (string, error) { return "", ErrUnavailable } },
		"totals": func(st *stubs) {
			st.periodTotals = func(string, time.Time) (PeriodTotals, error) { return PeriodTotals{}, ErrUnavailable }
		},
		"first page": func(st *stubs) {
			st.openPage = func(string, int64, int) ([]UsageRecord, int64, error) { return nil, 0, ErrUnavailable }
		},
		"later page": func(st *stubs) {
			page := pagedLedger(openRows(seedPage + 1))
			st.openPage = func(r string, after int64, n int) ([]UsageRecord, int64, error) {
				if after > 0 {
					return nil, 0, ErrUnavailable
				}
				return page(r, after, n)
			}
		},
		"seed": func(st *stubs) {
			st.seed = func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return false, ErrUnavailable }
		},
	} {
		st := &stubs{}
		fail(st)
		set(st)
		if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
		if st.n("TryLock") == 1 && name != "lock" && st.n("Unlock") != 1 {
			t.Errorf("%s: the lock was not released", name)
		}
	}
}

// While another instance holds the seeding lock, this one waits for the
// balance it writes and seeds nothing itself.
func TestSeedWaitsForAnotherInstancesBalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		st := &stubs{
			tryLock: func(string, string) (string, error) { return "", nil }, // held elsewhere
			balance: func(string, Period) (Balance, error) {
				return Balance{Exists: time.Since(start) >= 500*time.Millisecond, Limit: 100}, nil
			},
		}
		svc := newStubService(st, Options{Now: time.Now})
		s, err := svc.Status(context.Background(), "r")
		if err != nil || s.Remaining != 100 || st.n("Seed") != 0 || st.n("PeriodTotals") != 0 {
			t.Fatalf("%+v, %v; calls %v", s, err, st.calls)
		}
	})
}

// A lock holder that died (its lock expires, no balance comes) is replaced:
// the waiter takes the lock over once it is free, within a third of its TTL.
func TestSeedTakesOverFromAHolderThatDied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var seededAt time.Duration
		st := &stubs{
			tryLock: func(string, string) (string, error) {
				if time.Since(start) < seedLockTTL { // the dead holder's lock
					return "", nil
				}
				return "t2", nil
			},
			balance: func(string, Period) (Balance, error) { return Balance{Exists: seededAt > 0, Limit: 100}, nil },
			seed: func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) {
				seededAt = time.Since(start)
				return true, nil
			},
		}
		svc := newStubService(st, Options{Now: time.Now})
		if _, err := svc.Status(context.Background(), "r"); err != nil {
			t.Fatal(err)
		}
		if st.n("Seed") != 1 || seededAt < seedLockTTL || seededAt > seedLockTTL+seedLockTTL/3+time.Second {
			t.Fatalf("seeded %d times, %v after the holder died; want once, within a third of the lock's TTL (%v) of its expiry",
				st.n("Seed"), seededAt, seedLockTTL)
		}
	})
}

// A waiter gives up with ErrUnavailable when its caller's context (the
// seeding's own deadline) ends first, or when the balance cannot be read.
func TestSeedWaiterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &stubs{
			tryLock: func(string, string) (string, error) { return "", nil },
			balance: func(string, Period) (Balance, error) { return Balance{}, nil },
		}
		svc := newStubService(st, Options{Now: time.Now})
		start := time.Now()
		_, err := svc.Status(context.Background(), "r")
		if !errors.Is(err, ErrUnavailable) || time.Since(start) > seedTimeout+time.Second {
			t.Fatalf("%v after %v; want ErrUnavailable within the seeding's timeout %v", err, time.Since(start), seedTimeout)
		}
	})
	st := &stubs{tryLock: func(string, string) (string, error) { return "", nil }}
	n := 0
	st.balance = func(string, Period) (Balance, error) {
		n++
		if n == 1 {
			return Balance{}, nil // Status's first read: no balance
		}
		return Balance{}, ErrUnavailable
	}
	if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("balance unreadable while waiting: %v", err)
	}
}

// A seeding is shared by its callers but not bound to the first caller's
// cancellation: a caller that leaves does not fail the others.
func TestSeedOutlivesTheCallerThatStartedIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := &stubs{
		balance:      func(string, Period) (Balance, error) { return Balance{}, nil },
		periodTotals: func(string, time.Time) (PeriodTotals, error) { cancel(); return PeriodTotals{}, nil },
	}
	svc := newStubService(st, Options{})
	pol, _ := svc.Policy(context.Background(), "r")
	if err := svc.seed(ctx, pol, today); err != nil || st.n("Seed") != 1 || st.n("Unlock") != 1 {
		t.Fatalf("%v; calls %v", err, st.calls)
	}
}

// A balance dropped again right after it was seeded (two instances'
// failover watchers each drop it under the seed lock, one after the other;
// the second drop lands between this instance's seeding and its read) is
// seeded again: Status answered 200 with the figures of a missing balance
// (limit, used and remaining 0).
func TestStatusSeedsAgainWhenTheBalanceIsDroppedAgain(t *testing.T) {
	reads := 0
	st := &stubs{balance: func(string, Period) (Balance, error) {
		reads++
		if reads <= 2 { // absent; then dropped again after the first seeding
			return Balance{}, nil
		}
		return Balance{Exists: true, Limit: 100, Charged: 5}, nil
	}}
	s, err := newStubService(st, Options{}).Status(context.Background(), "r")
	if err != nil || s.Policy.TotalLimit != 100 || s.Used != 5 || s.Remaining != 95 || st.n("Seed") != 2 {
		t.Fatalf("status %+v, %v, seeded %d times; want limit 100, used 5, seeded twice", s, err, st.n("Seed"))
	}
	// A balance that never stays is unavailable, not a zero answer.
	st = &stubs{balance: func(string, Period) (Balance, error) { return Balance{}, nil }}
	if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a balance that keeps disappearing: %v; want ErrUnavailable", err)
	}
}
