package quota

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// blockable is the policy store and the PoolConfig of the hot-path tests:
// healthy until block, then every GetPolicy and Lines hangs, ignoring its
// context, until the test ends (a frozen MariaDB whose client has no
// deadline). A call that answers while they hang did not wait for them.
type blockable struct {
	*stubs
	pools   poolStub
	blocked atomic.Bool
	release chan struct{}
}

func newBlockable(t *testing.T) *blockable {
	b := &blockable{stubs: &stubs{}, release: make(chan struct{})}
	b.pools = poolStub{stubs: b.stubs, grants: oneGrant} // a pools' version
	t.Cleanup(func() { close(b.release) })
	return b
}

func (b *blockable) hang() {
	if b.blocked.Load() {
		<-b.release
	}
}

func (b *blockable) GetPolicy(ctx context.Context, resource string) (Policy, error) {
	b.hang()
	return b.stubs.GetPolicy(ctx, resource)
}

func (b *blockable) Lines(ctx context.Context, resource string) ([]pools.LineSpec, error) {
	b.hang()
	return b.pools.Lines(ctx, resource)
}

func (b *blockable) PoolSettings(ctx context.Context, resource string) (pools.Settings, bool, error) {
	return b.pools.PoolSettings(ctx, resource)
}

func (b *blockable) Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error) {
	return b.pools.Grants(ctx, resource, since)
}

func (b *blockable) GrantsHeld(ctx context.Context, resource string, since int64) (pools.GrantUse, error) {
	return b.pools.GrantsHeld(ctx, resource, since)
}

func (b *blockable) PoolMoves(ctx context.Context, resource string) (pools.Moves, error) {
	return b.pools.PoolMoves(ctx, resource)
}

func (b *blockable) UpdatePolicyLocked(ctx context.Context, p Policy, since int64, check func(pools.State) error) (Policy, bool, error) {
	b.hang()
	return b.pools.UpdatePolicyLocked(ctx, p, since, check)
}

func (b *blockable) RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error {
	return b.pools.RecordPoolEvents(ctx, resource, evs)
}

// answers runs call and fails the test if it has not returned within 10 s
// (a call that waits for a hung store never returns). It returns call's
// error.
func answers(t *testing.T, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not answer while its MySQL store hangs: it waited on MySQL", what)
		return nil
	}
}

// Issue 22 §5: with MariaDB frozen, heartbeats waited 2-4 s and finishes
// 6 s on policy and pool reads. A resource whose policy and pools the
// instance has read is served from the cache, stale past its TTL while a
// read in the background refreshes it: heartbeat, finish, apply and status
// answer correctly while the store hangs for good.
func TestHotPathAnswersWhileThePolicyStoreHangs(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	b := newBlockable(t)
	b.heartbeat = func(string, string, string, time.Duration) (time.Time, error) { return now.Add(time.Minute), nil }
	b.finish = func(FinishCmd) (FinishResult, error) { return FinishResult{Granted: 5, Charged: 3, Refunded: 2}, nil }
	svc := NewService(b.stubs, b.stubs, b, daySched{}, Options{
		Now: func() time.Time { return now }, Pools: PoolStores{Config: b, Balances: b.stubs}, PolicyCacheTTL: time.Second,
	})
	ctx := context.Background()
	ap, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
	if err != nil || ap.Granted != 5 || ap.PolicyVersion == "" {
		t.Fatalf("apply before the freeze: %+v, %v", ap, err)
	}
	b.blocked.Store(true)
	now = now.Add(time.Hour) // every cached entry expired: a read is due
	var hb HeartbeatResponse
	err = answers(t, "heartbeat", func() (err error) { hb, err = svc.Heartbeat(ctx, "r", "s-1", ""); return err })
	if err != nil || hb.Status != StatusUsing || !hb.LeaseExpiresAt.Equal(now.Add(time.Minute)) || hb.PolicyVersion == "" {
		t.Fatalf("heartbeat while the store hangs: %+v, %v", hb, err)
	}
	var fin FinishResponse
	err = answers(t, "finish", func() (err error) { fin, err = svc.Finish(ctx, finishReq); return err })
	if err != nil || fin.Charged != 3 || fin.Refunded != 2 || fin.QuotaType != TypeTokens {
		t.Fatalf("finish while the store hangs: %+v, %v", fin, err)
	}
	err = answers(t, "apply", func() (err error) {
		ap, err = svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-2"})
		return err
	})
	if err != nil || ap.Granted != 5 {
		t.Fatalf("apply while the store hangs: %+v, %v", ap, err)
	}
	err = answers(t, "status", func() error { _, err := svc.Status(ctx, "r"); return err })
	if err != nil {
		t.Fatalf("status while the store hangs: %v", err)
	}
	// One read at a time is in flight for each, however many calls.
	if n := b.n("GetPolicy"); n != 1 {
		t.Fatalf("%d policy reads reached the store, want 1 (the first; the refresh hangs before it counts)", n)
	}
}

// A resource the instance has not read waits for its read at most
// LedgerTimeout, then is 503 (ErrUnavailable); one invalidated by a change
// waits as long, then is served the answer it had.
func TestPolicyMissWaitsBoundedWhileTheStoreHangs(t *testing.T) {
	b := newBlockable(t)
	svc := NewService(b.stubs, b.stubs, b, daySched{}, Options{Pools: PoolStores{Config: b, Balances: b.stubs}, LedgerTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	if _, err := svc.Policy(ctx, "known"); err != nil {
		t.Fatal(err)
	}
	b.blocked.Store(true)
	err := answers(t, "a policy miss", func() error { _, err := svc.Policy(ctx, "cold"); return err })
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a miss while the store hangs: %v, want ErrUnavailable", err)
	}
	svc.ForgetPolicy("known") // a change announced: read again, but the store hangs
	var p Policy
	err = answers(t, "an invalidated policy", func() (err error) { p, err = svc.Policy(ctx, "known"); return err })
	if err != nil || p.ResourceName != "known" {
		t.Fatalf("an invalidated policy while the store hangs: %+v, %v; want the old one", p, err)
	}
	_, err = svc.Apply(ctx, ApplyRequest{ResourceName: "cold", Amount: 1})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply to a resource never read while the store hangs: %v, want ErrUnavailable", err)
	}
}

// hangingLedger's row writes and reads hang until their context ends (a
// frozen MariaDB behind a client that honours deadlines).
type hangingLedger struct{ *stubs }

func (h hangingLedger) FinishSession(ctx context.Context, _ UsageRecord) error {
	<-ctx.Done()
	return errors.Join(ErrUnavailable, ctx.Err())
}

func (h hangingLedger) Session(ctx context.Context, _ string) (UsageRecord, error) {
	<-ctx.Done()
	return UsageRecord{}, errors.Join(ErrUnavailable, ctx.Err())
}

// Every ledger call of the request path has a deadline of its own
// (LedgerTimeout), also when the caller's context has none: a finish whose
// row cannot be written is 503 (a retry completes it), a heartbeat for a
// session the store lost is 503, rather than hanging.
func TestLedgerCallsOnTheRequestPathHaveADeadline(t *testing.T) {
	st := &stubs{finish: func(FinishCmd) (FinishResult, error) { return FinishResult{Granted: 5, Charged: 3}, nil }}
	svc := NewService(st, hangingLedger{st}, st, daySched{}, Options{LedgerTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	err := answers(t, "finish", func() error { _, err := svc.Finish(ctx, finishReq); return err })
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("finish with the ledger hanging: %v, want ErrUnavailable", err)
	}
	err = answers(t, "heartbeat", func() error { _, err := svc.Heartbeat(ctx, "r", "s-1", ""); return err })
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("heartbeat of a session the store lost, ledger hanging: %v", err)
	}
}
