package redisstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// untilStoreTime moves the store's clock to at (ms): miniredis' TIME is
// set (SetTime); real Redis' cannot be, so this waits, polling TIME with a
// deadline, until it has passed at. The assertions that follow are on
// what the store answers then, not on how long it took.
func untilStoreTime(t *testing.T, e *env, at int64) {
	t.Helper()
	if e.mr != nil {
		e.mr.SetTime(time.UnixMilli(at))
		return
	}
	for give := time.Now().Add(20 * time.Second); e.now(t).UnixMilli() < at; {
		if time.Now().After(give) {
			t.Fatalf("the store's clock did not reach %d", at)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAClosingMarkExpiresAfterItsBound: a line's closing mark (a DELETE of
// it deciding, pool_close.lua) refuses new sessions on the line until its
// deadline, the bound after it was set, and no longer: a DELETE that died
// after the mark (the instance killed, MySQL failing before the mark was
// taken off) used to leave the line refusing every apply with 409 until an
// operator PUT or DELETEd it again. Past the deadline the mark no longer
// holds for its DELETE either (ClosingHeld: such a DELETE must fail), a
// late end of it by its token does not touch a newer mark, the tombstone a
// committed DELETE leaves does not expire, and the last line's DELETE
// drops the layout only while its mark holds. Real Redis, the cluster and
// miniredis (where the clock is set: the edge is checked to the ms).
func TestAClosingMarkExpiresAfterItsBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		a, b := w.names[0], w.names[1]
		n := 0
		apply := func(line string) error {
			n++
			c := e.cmd(fmt.Sprintf("s%d", n), 1, 0, w.per)
			c.Pools = &quota.PoolsCmd{Line: line, Critical: true, NoGrants: true}
			r, err := e.s.Apply(ctxT(t), c)
			if err == nil && r.Outcome != quota.ApplyGranted {
				t.Fatalf("apply on %s: %+v", line, r)
			}
			return err
		}
		// Long enough that the applies meant to meet the mark do on a
		// loaded machine (real Redis' clock cannot be set), short enough to
		// wait for.
		bound := 2 * time.Second
		_, mark, err := e.s.CloseLine(ctxT(t), e.res, a, bound)
		if err != nil {
			t.Fatal(err)
		}
		if err := apply(a); !errors.Is(err, pools.ErrLineClosing) {
			t.Fatalf("apply on a closing line: %v, want ErrLineClosing", err)
		}
		if e.mr != nil {
			untilStoreTime(t, e, mark-1)
			if err := apply(a); !errors.Is(err, pools.ErrLineClosing) {
				t.Fatalf("apply 1 ms before the mark's deadline: %v, want ErrLineClosing", err)
			}
		}
		if held, err := e.s.ClosingHeld(ctxT(t), e.res, a, mark, false); err != nil || !held && e.mr != nil {
			t.Fatalf("ClosingHeld before the deadline: %v %v", held, err)
		}
		untilStoreTime(t, e, mark)
		if err := apply(a); err != nil {
			t.Fatalf("apply once the mark's deadline passed (its DELETE died): %v, want granted", err)
		}
		if held, err := e.s.ClosingHeld(ctxT(t), e.res, a, mark, false); err != nil || held {
			t.Fatalf("ClosingHeld after the deadline: %v %v, want false (the DELETE must fail)", held, err)
		}

		// A newer DELETE's mark is not ended by the old one's token.
		_, mark2, err := e.s.CloseLine(ctxT(t), e.res, a, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.s.EndClosing(ctxT(t), e.res, a, mark, false); err != nil {
			t.Fatal(err)
		}
		if err := apply(a); !errors.Is(err, pools.ErrLineClosing) {
			t.Fatalf("apply after a stale end: %v, want ErrLineClosing", err)
		}
		if err := e.s.EndClosing(ctxT(t), e.res, a, mark2, false); err != nil {
			t.Fatal(err)
		}
		if err := apply(a); err != nil {
			t.Fatalf("apply after the mark was taken off: %v", err)
		}

		// A committed DELETE's tombstone does not expire; a PUT (end of
		// any mark) takes it off.
		_, mark3, err := e.s.CloseLine(ctxT(t), e.res, b, bound)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.s.EndClosing(ctxT(t), e.res, b, mark3, true); err != nil {
			t.Fatal(err)
		}
		untilStoreTime(t, e, mark3+1)
		if err := apply(b); !errors.Is(err, pools.ErrLineClosing) {
			t.Fatalf("apply on a deleted line's tombstone past the bound: %v, want ErrLineClosing", err)
		}
		if m, err := e.s.PoolModel(ctxT(t), e.res, w.per, w.lay); err != nil || m.Lines[b].ClosingUntil != pools.Deleted {
			t.Fatalf("tombstone read back as %+v (%v)", m.Lines[b], err)
		}
		if err := e.s.EndClosing(ctxT(t), e.res, b, 0, false); err != nil {
			t.Fatal(err)
		}
		if err := apply(b); err != nil {
			t.Fatalf("apply after a PUT took the tombstone off: %v", err)
		}

		// The last line's DELETE drops the layout only while its mark holds.
		_, mark4, err := e.s.CloseLine(ctxT(t), e.res, b, bound)
		if err != nil {
			t.Fatal(err)
		}
		untilStoreTime(t, e, mark4)
		if dropped, err := e.s.ClosingHeld(ctxT(t), e.res, b, mark4, true); err != nil || dropped {
			t.Fatalf("drop past the deadline: %v %v, want not dropped", dropped, err)
		}
		if n, err := e.rdb.Exists(ctxT(t), poolKey(e.res)).Result(); err != nil || n != 1 {
			t.Fatalf("layout after a refused drop: exists %d %v", n, err)
		}
		_, mark5, err := e.s.CloseLine(ctxT(t), e.res, b, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if dropped, err := e.s.ClosingHeld(ctxT(t), e.res, b, mark5, true); err != nil || !dropped {
			t.Fatalf("drop while the mark holds: %v %v", dropped, err)
		}
		if n, err := e.rdb.Exists(ctxT(t), poolKey(e.res)).Result(); err != nil || n != 0 {
			t.Fatalf("layout after the drop: exists %d %v", n, err)
		}
	})
}
