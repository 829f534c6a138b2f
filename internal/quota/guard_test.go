package quota

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// breakerStub refuses every call while open, and records the errors of the
// calls it let through.
type breakerStub struct {
	open   bool
	judged []error
}

func (b *breakerStub) Allow() (func(error), error) {
	if b.open {
		return nil, &CircuitOpenError{Backend: "test", RetryAfter: time.Second}
	}
	return func(err error) { b.judged = append(b.judged, err) }, nil
}

// An open breaker answers ErrCircuitOpen without making the call; a closed
// one makes it and judges its error.
func TestGuardAppliesTheBreaker(t *testing.T) {
	boom := errors.New("boom")
	for _, b := range []*breakerStub{{open: true}, {}} {
		calls := 0
		v, err := Guard(b, func() (int, error) { calls++; return 7, boom })
		errE := GuardErr(b, func() error { calls++; return boom })
		if b.open {
			if !errors.Is(err, ErrCircuitOpen) || !errors.Is(errE, ErrCircuitOpen) || v != 0 || calls != 0 || len(b.judged) != 0 {
				t.Fatalf("open: %d, %v, %v; %d calls", v, err, errE, calls)
			}
			continue
		}
		if v != 7 || !errors.Is(err, boom) || !errors.Is(errE, boom) || calls != 2 || len(b.judged) != 2 || !errors.Is(b.judged[0], boom) {
			t.Fatalf("closed: %d, %v, %v; %d calls, judged %v", v, err, errE, calls, b.judged)
		}
	}
	v, err := Guard(nil, func() (int, error) { return 7, nil })
	if v != 7 || err != nil || !errors.Is(GuardErr(nil, func() error { return boom }), boom) {
		t.Fatal("no breaker: the call goes through")
	}
}

// The Service calls both backends through their breakers: an open Redis
// breaker fails an apply before the store is asked (CLOSED: 503), an open
// MySQL breaker fails the policy read.
func TestServiceCallsThroughItsBreakers(t *testing.T) {
	ctx := context.Background()
	st := &stubs{}
	redis, mysql := &breakerStub{open: true}, &breakerStub{}
	svc := newStubService(st, Options{Breakers: Breakers{Balances: redis, Ledger: mysql}})
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 1}); !errors.Is(err, ErrCircuitOpen) || st.n("Apply") != 0 {
		t.Fatalf("redis open: %v, %d applies", err, st.n("Apply"))
	}
	if len(mysql.judged) != 1 {
		t.Fatalf("the policy read was not judged by the MySQL breaker: %v", mysql.judged)
	}
	mysql.open = true
	svc = newStubService(st, Options{Breakers: Breakers{Balances: &breakerStub{}, Ledger: mysql}})
	if _, err := svc.Status(ctx, "r"); !errors.Is(err, ErrCircuitOpen) || st.n("GetPolicy") != 1 {
		t.Fatalf("mysql open: %v", err)
	}
}

// The lock is renewed more often than it expires, each renewal bounded
// by a deadline shorter than the lock's TTL (a hung renewal is abandoned
// before the lock could expire).
func TestKeepLockRenewsWithinTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		var renewals atomic.Int64
		var worst atomic.Int64 // longest renewal deadline, ns
		l := &deadlineLocker{renew: func(ctx context.Context) {
			renewals.Add(1)
			if dl, ok := ctx.Deadline(); ok {
				worst.Store(max(worst.Load(), int64(time.Until(dl))))
			}
		}}
		_, stop := KeepLock(context.Background(), l, nil, "r", "seed:1", "t", ttl)
		time.Sleep(ttl)
		stop()
		if n := renewals.Load(); n < 2 {
			t.Fatalf("%d renewals within one TTL, want at least 2", n)
		}
		if w := time.Duration(worst.Load()); w <= 0 || w >= ttl {
			t.Fatalf("renewal deadline %v, want above 0 and below the TTL %v", w, ttl)
		}
	})
}

type deadlineLocker struct{ renew func(context.Context) }

func (d *deadlineLocker) TryLock(context.Context, string, string, time.Duration) (string, error) {
	return "t", nil
}
func (d *deadlineLocker) Unlock(context.Context, string, string, string) error { return nil }
func (d *deadlineLocker) RenewLock(ctx context.Context, _, _, _ string, _ time.Duration) (bool, error) {
	d.renew(ctx)
	return true, nil
}
