package redisstore

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestSweepLeaksAnExpiredSessionAndReportsItUntilAcked(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		c := e.cmd("s", 30, 0, per)
		c.Lease = time.Millisecond
		a := e.grant(t, c, 30)
		e.grant(t, e.cmd("alive", 5, 0, per), 5)

		l, all := e.waitSwept(t, "s")
		if len(all) != 1 {
			t.Fatalf("swept %v, want only s", all)
		}
		if l.ResourceName != e.res || !l.PeriodStart.Equal(per.Start) || l.Granted != 30 || !l.Fresh ||
			l.EndTime.Before(a.LeaseExpiresAt) {
			t.Fatalf("leak %+v, want s of period %v granted 30, fresh, ended after the lease %v", l, per.Start, a.LeaseExpiresAt)
		}
		wantBalance(t, e.balance(t, per), 100, 30, 5)
		s := e.session(t, "s")
		if s["status"] != "LEAKED" || s["end"] != fmt.Sprint(l.EndTime.UnixMilli()) {
			t.Fatalf("session after sweep %v", s)
		}
		if ttl, _ := e.rdb.PTTL(ctxT(t), sessionKey(e.res, "s")).Result(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("leaked session PTTL %v, want within (0, 1h] (retention)", ttl)
		}

		// Not acknowledged yet: reported again, not fresh, charged once.
		for range 2 {
			again := e.sweep(t, 100)
			if len(again) != 1 || again[0].Fresh || again[0].SessionID != "s" || again[0].Granted != 30 ||
				!again[0].EndTime.Equal(l.EndTime) || !again[0].PeriodStart.Equal(per.Start) {
				t.Fatalf("second sweep %+v, want s again, not fresh", again)
			}
		}
		wantBalance(t, e.balance(t, per), 100, 30, 5)

		if err := e.s.AckLeaks(ctxT(t), e.res, []string{"s"}); err != nil {
			t.Fatal(err)
		}
		if got := e.sweep(t, 100); len(got) != 0 {
			t.Fatalf("sweep after AckLeaks: %+v, want nothing", got)
		}
		if err := e.s.AckLeaks(ctxT(t), e.res, nil); err != nil {
			t.Fatalf("AckLeaks(nil): %v", err)
		}
	})
}

func TestSweepNeverSweepsAHeartbeatingSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("alive", 10, 0, per), 10) // 10-minute lease
		c := e.cmd("dead", 20, 0, per)
		c.Lease = time.Millisecond
		e.grant(t, c, 20)
		// A session that missed its lease but was heartbeated before any
		// sweep ran is alive again.
		c = e.cmd("revived", 5, 0, per)
		c.Lease = time.Millisecond
		a := e.grant(t, c, 5)
		for e.now(t).Before(a.LeaseExpiresAt.Add(time.Millisecond)) {
			time.Sleep(time.Millisecond)
		}
		if _, err := e.s.Heartbeat(ctxT(t), e.res, "revived", "", 10*time.Minute); err != nil {
			t.Fatal(err)
		}

		_, all := e.waitSwept(t, "dead")
		for range 5 {
			for _, l := range e.sweep(t, 100) {
				if l.Fresh {
					all = append(all, l)
				}
			}
			if _, err := e.s.Heartbeat(ctxT(t), e.res, "alive", "", 10*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if len(all) != 1 || all[0].SessionID != "dead" {
			t.Fatalf("swept %+v, want only dead", all)
		}
		for _, id := range []string{"alive", "revived"} {
			if st := e.session(t, id)["status"]; st != "USING" {
				t.Fatalf("%s is %s, want USING", id, st)
			}
		}
		wantBalance(t, e.balance(t, per), 100, 20, 15)
	})
}

func TestFinishAfterLeakTruesUp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                      string
		actual                    int64
		refunded, overage, remain int64
	}{
		{"refunds what was not used", 12, 18, 0, 88},
		{"charges an overage", 45, 0, 15, 55},
		{"changes nothing when all was used", 30, 0, 0, 70},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				per := e.current(t)
				e.seed(t, per, 100, quota.PeriodTotals{})
				cmd := e.cmd("s", 30, 0, per)
				cmd.Lease = time.Millisecond
				e.grant(t, cmd, 30)
				e.waitSwept(t, "s")
				wantBalance(t, e.balance(t, per), 100, 30, 0)

				f := e.finish(t, "s", c.actual)
				if !f.WasLeaked || f.Replayed || f.Granted != 30 || f.Charged != c.actual ||
					f.Refunded != c.refunded || f.Overage != c.overage || f.Remaining != c.remain {
					t.Fatalf("late finish %+v", f)
				}
				wantBalance(t, e.balance(t, per), 100, c.actual, 0)
				again := e.finish(t, "s", c.actual)
				if !again.Replayed || !again.WasLeaked || again.Charged != c.actual {
					t.Fatalf("repeat of late finish %+v", again)
				}
				wantBalance(t, e.balance(t, per), 100, c.actual, 0)
				if s := e.session(t, "s"); s["status"] != "FINISHED" {
					t.Fatalf("session %v, want FINISHED", s)
				}
			})
		})
	}
}

func TestSweepConcurrentSweepersSweepEachSessionOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const n, sweepers = 40, 4
		per := e.current(t)
		e.seed(t, per, 10000, quota.PeriodTotals{})
		var last time.Time
		for i := range n {
			c := e.cmd(fmt.Sprintf("s%02d", i), int64(i+1), 0, per)
			c.Lease = time.Millisecond
			last = e.grant(t, c, int64(i+1)).LeaseExpiresAt
		}
		for !e.now(t).After(last) {
			time.Sleep(time.Millisecond)
		}

		var (
			mu    sync.Mutex
			fresh = map[string]int{}
			wg    sync.WaitGroup
			errs  []error
		)
		for range sweepers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					got, err := e.s.Sweep(ctxT(t), e.res, 3, time.Hour)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					}
					for _, l := range got {
						if l.Fresh {
							fresh[l.SessionID]++
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatal(errs[0])
		}
		var twice []string
		for id, k := range fresh {
			if k != 1 {
				twice = append(twice, id)
			}
		}
		sort.Strings(twice)
		if len(fresh) != n || len(twice) > 0 {
			t.Fatalf("%d sessions swept fresh (want %d); swept more than once: %v", len(fresh), n, twice)
		}
		wantBalance(t, e.balance(t, per), 10000, n*(n+1)/2, 0)
	})
}
