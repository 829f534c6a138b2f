package redisstore

import (
	"github.com/quotacenter/quota-center/internal/quota"
	"sync"
	"testing"
	"time"
)

// Issue 23 §1: every state-changing call names its resource to the
// OnChange hook (the change log the background loops skip unchanged
// resources by), reads and locks do not; SweepHeldNext tells how long
// until the earliest running lease ends (none: negative).
func TestOnChangeAndTheNextLeaseEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var got []string
		e.s.OnChange(func(r string) { mu.Lock(); got = append(got, r); mu.Unlock() })
		calls := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		if c := calls(); len(c) != 1 || c[0] != e.res {
			t.Fatalf("after a seed: %v, want [%s]", c, e.res)
		}
		_, _, next, err := e.s.SweepHeldNext(ctxT(t), e.res, 10, time.Hour, nil)
		if err != nil || next >= 0 {
			t.Fatalf("no lease: next %v, %v; want negative", next, err)
		}
		e.balance(t, per)
		tok, err := e.s.TryLock(ctxT(t), e.res, "x", time.Second)
		if err != nil || tok == "" {
			t.Fatalf("lock: %q %v", tok, err)
		}
		if err := e.s.Unlock(ctxT(t), e.res, "x", tok); err != nil {
			t.Fatal(err)
		}
		if c := calls(); len(c) != 1 {
			t.Fatalf("reads, a sweep with nothing to do and a lock named %v, want no call", c[1:])
		}
		e.grant(t, e.cmd("s1", 5, 5, per), 5) // a 10-minute lease
		if c := calls(); len(c) != 2 || c[1] != e.res {
			t.Fatalf("after an apply: %v", c)
		}
		_, _, next, err = e.s.SweepHeldNext(ctxT(t), e.res, 10, time.Hour, nil)
		if err != nil || next <= 9*time.Minute || next > 10*time.Minute {
			t.Fatalf("a 10-minute lease: next %v, %v", next, err)
		}
		e.finish(t, "s1", 5)
		if c := calls(); len(c) < 3 {
			t.Fatalf("after a finish: %v", c)
		}
	})
}

func TestResourceOfKey(t *testing.T) {
	for key, want := range map[string]string{"qc:{r1}:b:5": "r1", "qc:{a.b-c}:s:x}:y": "a.b-c", "qc:{}:x": "", "other": ""} {
		if got, ok := resourceOf(key); got != want || ok != (want != "") {
			t.Errorf("resourceOf(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
}
