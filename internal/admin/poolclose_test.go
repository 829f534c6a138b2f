package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// dyingStore is the policy store of an instance that stops in the middle
// of a line's DELETE: ChangePools decides (the DELETE marks the line
// closing and counts its sessions) and then fails before anything is
// written, as when MySQL fails or the process is killed (its transaction
// is rolled back: the line stays).
type dyingStore struct{ *mysqlstore.Store }

func (s dyingStore) ChangePools(ctx context.Context, resource string, since int64, at time.Time,
	decide func(pools.State) (pools.Change, error), then func() error) (bool, error) {
	return s.Store.ChangePools(ctx, resource, since, at, func(st pools.State) (pools.Change, error) {
		if _, err := decide(st); err != nil {
			return pools.Change{}, err
		}
		return pools.Change{}, errors.New("the instance stopped")
	}, nil)
}

// goneLive is that instance's Redis: it marks the line closing, and then
// takes nothing off any more (the process is gone).
type goneLive struct{ *redisstore.Store }

func (goneLive) EndClosing(context.Context, string, string, int64, bool) error {
	return errors.New("the instance stopped")
}

// ReopenLine is the name the mark's removal had before it became a lease.
func (goneLive) ReopenLine(context.Context, string, string) error {
	return errors.New("the instance stopped")
}

// TestADeleteThatDiesAfterItsMarkLeavesTheLineUsableWithinTheBound: a
// line's DELETE first marks the line closing in Redis (applies on it are
// refused, 409) and takes the mark off when it is refused or fails. When
// the instance died between the mark and its end, the mark stayed for
// good: every apply on the line answered 409 "business line is being
// deleted" until an operator happened to PUT or DELETE it again. Now the
// mark lapses after the bound (30 s by default): before it the line still
// refuses (that DELETE might be running), after it the line takes
// sessions (dev mode: miniredis, whose clock the test sets, and SQLite).
// On main the apply after 31 s is still refused.
func TestADeleteThatDiesAfterItsMarkLeavesTheLineUsableWithinTheBound(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	q := w.Quota(quota.Breakers{})
	dying := admin.NewPools(dyingStore{w.DB}, goneLive{w.RS}, q, w, w.Now)
	start := time.Now()
	err := dying.DeleteLine(w.Ctx, "llm", "a")
	t.Logf("the dying DELETE answered: %v", err)
	if err == nil {
		t.Fatal("the dying DELETE answered nil")
	}
	apply := func(id string) error {
		c := quota.ApplyCmd{ResourceName: "llm", SessionID: id, Amount: 10, Period: w.Per, Lease: time.Minute,
			Pools: &quota.PoolsCmd{Line: "a", Critical: true}}
		r, err := w.RS.Apply(w.Ctx, c)
		if err == nil && r.Granted != 10 {
			t.Fatalf("apply %s: %+v", id, r)
		}
		return err
	}
	if err := apply("s1"); !errors.Is(err, pools.ErrLineClosing) {
		t.Fatalf("apply right after the dying DELETE: %v, want ErrLineClosing", err)
	}
	w.MR.SetTime(start.Add(20 * time.Second)) // within the bound: that DELETE may still be running
	if err := apply("s2"); !errors.Is(err, pools.ErrLineClosing) {
		t.Fatalf("apply 20 s after the dying DELETE: %v, want ErrLineClosing", err)
	}
	w.MR.SetTime(time.Now().Add(31 * time.Second)) // the default bound, 30 s, has passed
	if err := apply("s3"); err != nil {
		t.Fatalf("apply once the bound passed: %v, want granted (the mark outlived its DELETE)", err)
	}
	// The line is stored and whole: a healthy DELETE removes it once its
	// session is done.
	if _, err := w.RS.Finish(w.Ctx, quota.FinishCmd{ResourceName: "llm", SessionID: "s3", Actual: 10, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := poolAdmin(w).DeleteLine(w.Ctx, "llm", "a"); err != nil {
		t.Fatalf("a healthy DELETE afterwards: %v", err)
	}
	if err := apply("s4"); err == nil {
		t.Fatal("apply on the deleted line granted")
	}
}

// stallingStore is a policy store whose ChangePools stalls after the
// decision (a DELETE's mark set and its sessions counted) for longer than
// the closing mark's bound: stall moves the store's clock past it.
type stallingStore struct {
	*mysqlstore.Store
	stall func()
}

func (s stallingStore) ChangePools(ctx context.Context, resource string, since int64, at time.Time,
	decide func(pools.State) (pools.Change, error), then func() error) (bool, error) {
	return s.Store.ChangePools(ctx, resource, since, at, func(st pools.State) (pools.Change, error) {
		ch, err := decide(st)
		s.stall()
		return ch, err
	}, then)
}

// TestADeleteThatOutlivesItsBoundIsNotAnswered200: the closing mark lapses
// after the bound even while its DELETE still runs, so applies may open
// sessions on the line from then on; such a DELETE must not answer 200.
// It checks that its mark still held once its layout without the line was
// written, and fails (quota.ErrUnavailable, HTTP 503) when not. On SQLite
// the layout is written after the commit (mysqlstore.Store.ChangePools):
// there the line is gone, and its mark is left as the tombstone, so no
// session opens on it; on MySQL the transaction is rolled back and the
// line takes sessions again.
func TestADeleteThatOutlivesItsBoundIsNotAnswered200(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	q := w.Quota(quota.Breakers{})
	a := admin.NewPools(stallingStore{Store: w.DB, stall: func() { w.MR.SetTime(time.Now().Add(time.Minute)) }}, w.RS, q, w, w.Now)
	a.SetLineCloseBound(10 * time.Second)
	err := a.DeleteLine(w.Ctx, "llm", "a")
	if !errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("DELETE that outlived its bound: %v, want ErrUnavailable", err)
	}
	t.Logf("answered: %v", err)
	lines, lerr := w.DB.Lines(w.Ctx, "llm")
	if lerr != nil {
		t.Fatal(lerr)
	}
	c := quota.ApplyCmd{ResourceName: "llm", SessionID: "s1", Amount: 10, Period: w.Per, Lease: time.Minute,
		Pools: &quota.PoolsCmd{Line: "a", Critical: true}}
	_, aerr := w.RS.Apply(w.Ctx, c)
	if len(lines) != 1 || lines[0].Name != "b" {
		t.Fatalf("SQLite: lines %+v, want b alone (committed before the layout's write)", lines)
	}
	if aerr == nil {
		t.Fatal("apply on the line deleted by a DELETE answered 503: granted")
	}
}
