package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fence names a held lock (Name of a resource, as taken by TryLock, and its
// Token) that a store write must be made under: the store checks, in the
// same atomic step as the write, that the lock still holds Token, and
// refuses the write with ErrLockLost otherwise. So a holder cut off for
// longer than the lock's TTL, whose lock another instance has taken since,
// cannot write over the new holder's work (issue 11 §3.4). The zero Fence
// writes unfenced.
type Fence struct {
	Name  string // lock name, e.g. "reconcile" or "seed:<periodMs>"
	Token string // the holder's token; "" = not fenced
}

// KeepLock renews a held lock (name of resource, token) every ttl/3 until
// the returned stop is called, so that a short ttl bounds how long a dead
// holder blocks the others while a live one keeps the lock however long it
// works (issue 11 §3.4). The returned context is ctx, cancelled when the
// lock is found held by another token (the holder must stop: it lost it),
// with ErrLockLost as its cause (see LockLost); a renewal that fails (the
// store unreachable) is retried at the next tick. Renewals go through b
// (resource's breaker, see ForResource).
// stop waits for the renewing goroutine to end.
func KeepLock(ctx context.Context, l Locker, b Breaker, resource, name, token string, ttl time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(ttl/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, ttl/3+time.Millisecond)
			held, err := Guard(ForResource(b, resource), func() (bool, error) { return l.RenewLock(rctx, resource, name, token, ttl) })
			rcancel()
			if err == nil && !held {
				cancel(ErrLockLost)
				return
			}
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// LockLost returns err as an ErrLockLost when ctx, a context of KeepLock,
// was cancelled because the lock was lost: a call that failed then (a
// ledger read answering context.Canceled) failed because its holder was
// stopped, not because a backend did, and the caller starts over or stops
// as for a refused fenced write. Otherwise it returns err as it is (nil
// stays nil).
func LockLost(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrLockLost) || !errors.Is(context.Cause(ctx), ErrLockLost) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrLockLost, err)
}
