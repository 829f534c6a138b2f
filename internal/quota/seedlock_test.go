//go:build !mutation

package quota_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

// TestASeederThatLosesItsLockMidReadStartsOver: a rebuild's seeder whose
// seed lock is taken by another instance while it reads the ledger (it was
// cut off past the lock's 3 s TTL; here the other token is written over
// it) is stopped by its lock renewal, which cancels its work. The ledger
// read then fails with context.Canceled, which is no backend failure:
// GET /quota/status answered 500 INTERNAL_ERROR (seen once in
// TestTwoInstancesSweepALeakOnce on the cluster, where a failover made
// both instances rebuild). The seeder must start over instead, as when its
// fenced write is refused: wait for the other's balance, or take the lock
// once it is free, and seed.
func TestASeederThatLosesItsLockMidReadStartsOver(t *testing.T) {
	e := newG7Env(t)
	if _, err := e.svc.Apply(t.Context(), quota.ApplyRequest{ResourceName: "g7", Amount: 7, SessionID: "held"}); err != nil {
		t.Fatal(err)
	}
	per := e.status(t).Period
	if err := e.store.DropBalance(t.Context(), "g7", per, quota.Fence{}); err != nil {
		t.Fatal(err)
	}
	lock := "qc:{g7}:lock:seed:" + strconv.FormatInt(per.ID(), 10)
	stopped := make(chan struct{})
	e.ledger.before = func(ctx context.Context) {
		if err := e.mr.Set(lock, "another-instance"); err != nil {
			t.Error(err)
		}
		<-ctx.Done() // the renewal found the other token: this seeder is stopped
		close(stopped)
		e.mr.Del(lock) // the other instance gives up without a balance
	}
	st, err := e.svc.Status(t.Context(), "g7")
	select {
	case <-stopped:
	default:
		t.Fatal("the seeder was not stopped: nothing reproduced")
	}
	if err != nil {
		t.Fatalf("status while a seeder lost its lock: %v (code %s); want the balance seeded on the next try", err, quota.CodeOf(err))
	}
	if st.Reserved != 7 || st.Used != 0 {
		t.Fatalf("status used %d reserved %d; want the ledger's 0 and 7", st.Used, st.Reserved)
	}
}
