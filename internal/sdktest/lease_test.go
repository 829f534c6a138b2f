package sdktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

func TestHeartbeatsKeepALongSessionAlivePastTheLeakThreshold(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeDuration, TotalLimit: 1000, LeakThresholdSeconds: 3})
		m := manager(t, s.URL)
		l, err := m.Acquire(context.Background(), r, 100)
		if err != nil {
			t.Fatal(err)
		}
		// Three leak thresholds with the sweeper every 100 ms: without the
		// lease's heartbeats (every 1 s here) the session is swept in ~3 s.
		end := time.Now().Add(9 * time.Second)
		for time.Now().Before(end) {
			if st := status(t, s, r); st.ActiveSessions != 1 || st.ReservedAmount != 100 || st.UsedAmount != 0 {
				t.Fatalf("the heartbeated session changed: %+v", st)
			}
			time.Sleep(250 * time.Millisecond)
		}
		fr, err := l.Finish(context.Background(), 7)
		if err != nil || fr.ChargedAmount != 7 || fr.RefundedAmount != 93 {
			t.Fatalf("finish: %+v, %v", fr, err)
		}
		if st := status(t, s, r); st.UsedAmount != 7 || st.ReservedAmount != 0 {
			t.Fatalf("after finish: %+v", st)
		}
	})
}

func TestLeakGuardFinishesAForgottenLeaseWithItsWholeGrant(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeDuration, TotalLimit: 1000, LeakThresholdSeconds: 300})
		reg := prometheus.NewRegistry()
		m := manager(t, s.URL, client.WithLeakGuard(500*time.Millisecond), client.WithRegistry(reg))
		l, err := m.Acquire(context.Background(), r, 2) // guard at 2 s + 0.5 s
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Context().Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the leak guard did not end the lease")
		}
		testenv.Eventually(t, 10*time.Second, "the guard's finish to reach the center", func() bool {
			st := status(t, s, r)
			return st.ActiveSessions == 0 && st.UsedAmount == 2
		})
		if n := testutil.ToFloat64(prometheusCounter(t, reg, "quota_client_leak_guard_total")); n != 1 {
			t.Fatalf("quota_client_leak_guard_total = %v, want 1", n)
		}
		if _, err := l.Finish(context.Background(), 1); !errors.Is(err, client.ErrLeaseEnded) {
			t.Fatalf("Finish after the guard fired: %v, want ErrLeaseEnded", err)
		}
		if st := status(t, s, r); st.UsedAmount != 2 {
			t.Fatalf("a Finish after the guard changed the charge: %+v", st)
		}
	})
}

func TestCancelledContextFinishesWithTheElapsedSeconds(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeDuration, TotalLimit: 1000})
	m := manager(t, s.URL)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := m.Acquire(ctx, r, 600)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l.Context().Done()
	testenv.Eventually(t, 10*time.Second, "the cancellation's finish", func() bool { return status(t, s, r).ActiveSessions == 0 })
	if st := status(t, s, r); st.UsedAmount < 1 || st.UsedAmount > 5 {
		t.Fatalf("a lease cancelled at once must be charged its elapsed seconds (1 rounded up), got %+v", st)
	}
}

// TestDoChargesTheMeasuredSecondsOnADurationResource: fn returns -1 on a
// DURATION resource, and the session is charged the elapsed seconds
// (rounded up), not the 600 applied for; a panic there is charged the
// elapsed seconds too.
func TestDoChargesTheMeasuredSecondsOnADurationResource(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeDuration, TotalLimit: 10_000})
	m := manager(t, s.URL)
	if err := m.Do(context.Background(), r, 600, func(context.Context) (int64, error) { return -1, nil }); err != nil {
		t.Fatal(err)
	}
	err := m.Do(context.Background(), r, 600, func(context.Context) (int64, error) { panic("kaput") })
	var pe *client.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Do with a panic: %v", err)
	}
	if st := status(t, s, r); st.UsedAmount < 2 || st.UsedAmount > 10 || st.ActiveSessions != 0 {
		t.Fatalf("status %+v, want the elapsed seconds of two short calls (1 each, rounded up), not their 600", st)
	}
}

func TestDoFinishesWhenFnFailsOrPanics(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000})
	m := manager(t, s.URL)
	boom := errors.New("boom")
	err := m.Do(context.Background(), r, 100, func(context.Context) (int64, error) { return 30, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	err = m.Do(context.Background(), r, 100, func(context.Context) (int64, error) { panic("kaput") })
	var pe *client.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaput" {
		t.Fatalf("Do with a panic: %v", err)
	}
	if err := m.Do(context.Background(), r, 100, func(context.Context) (int64, error) { return 5, nil }); err != nil {
		t.Fatal(err)
	}
	// 30 reported with the error, the whole grant (100) for the panic, 5.
	if st := status(t, s, r); st.UsedAmount != 135 || st.ActiveSessions != 0 {
		t.Fatalf("status %+v, want used 135 and no open session", st)
	}
}

func TestBreakerOpensAfterFiveFailuresAndHalfOpensAfterItsTime(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeCount, TotalLimit: 1000})
	p := newProxy(t, s.URL)
	m := manager(t, p.URL, client.WithBreaker(5, time.Second), client.WithRetry(1, time.Millisecond, time.Millisecond),
		client.WithReportInterval(time.Hour))
	p.down.Store(true)
	for i := range 5 {
		_, err := m.Acquire(context.Background(), r, 1)
		var ue *client.UnavailableError
		if !errors.As(err, &ue) || ue.Tries != 1 || errors.Is(err, client.ErrBreakerOpen) {
			t.Fatalf("apply %d while down: %v, want an UnavailableError after one try", i, err)
		}
	}
	if got := m.BreakerState(); got != "open" {
		t.Fatalf("breaker after 5 failures: %s", got)
	}
	_, err := m.Acquire(context.Background(), r, 1)
	if !errors.Is(err, client.ErrBreakerOpen) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("apply with the breaker open: %v", err)
	}
	if n := len(p.hits("/quota/apply")); n != 5 {
		t.Fatalf("the open breaker let a call through: %d applies reached the proxy, want 5", n)
	}
	p.down.Store(false)
	testenv.Eventually(t, 10*time.Second, "half-open after 1 s", func() bool { return m.BreakerState() == "half-open" })
	l, err := m.Acquire(context.Background(), r, 1)
	if err != nil {
		t.Fatalf("the probe apply: %v", err)
	}
	if got := m.BreakerState(); got != "closed" {
		t.Fatalf("breaker after a good probe: %s", got)
	}
	if _, err := l.Finish(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeCount, TotalLimit: 1000})
	p := newProxy(t, s.URL)
	m := manager(t, p.URL, client.WithRetry(3, time.Millisecond, 5*time.Millisecond))
	p.add(rule{path: "/quota/apply", status: 503, retryAfter: "2"})
	l, err := m.Acquire(context.Background(), r, 1)
	if err != nil {
		t.Fatalf("apply after one 503: %v", err)
	}
	h := p.hits("/quota/apply")
	if len(h) != 2 {
		t.Fatalf("%d applies, want 2", len(h))
	}
	if gap := h[1].at.Sub(h[0].at); gap < 2*time.Second {
		t.Fatalf("retried after %v, before the server's Retry-After of 2 s", gap)
	}
	// A Retry-After past the caller's deadline ends the call at once.
	p.add(rule{path: "/quota/apply", status: 503, retryAfter: "3600"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := m.Acquire(ctx, r, 1); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("apply with Retry-After past the deadline: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited for the deadline instead of giving up")
	}
	_, _ = l.Finish(context.Background(), 1)
}

func TestFailOpenUsageIsChargedExactlyOnceWhenTheCenterIsBack(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000})
		p := newProxy(t, s.URL)
		m := manager(t, p.URL, client.WithFallback(r, client.FailOpen()), client.WithRetry(1, time.Millisecond, time.Millisecond), client.WithBreaker(100, time.Second),
			client.WithReportInterval(50*time.Millisecond))
		p.down.Store(true)
		var failOpen bool
		err := m.Do(context.Background(), r, 100, func(ctx context.Context) (int64, error) { return 40, nil })
		if err != nil {
			t.Fatalf("Do on a fail-open resource with the center down: %v", err)
		}
		l, err := m.Acquire(context.Background(), r, 10)
		if err != nil {
			t.Fatal(err)
		}
		failOpen = l.FailOpen()
		if _, err := l.Finish(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		if !failOpen || m.PendingReports() == 0 {
			t.Fatalf("FailOpen %v, pending %d: the fallback must be visible and the usage remembered", failOpen, m.PendingReports())
		}
		// The first finishes reach the center but their answers are lost:
		// each report is sent again and must not charge twice.
		for range 4 {
			p.add(rule{path: "/quota/finish", dropAnswer: true})
		}
		p.down.Store(false)
		testenv.Eventually(t, 20*time.Second, "the reports to be delivered", func() bool { return m.PendingReports() == 0 })
		st := status(t, s, r)
		if st.UsedAmount != 42 || st.ReservedAmount != 0 || st.ActiveSessions != 0 {
			t.Fatalf("status after the reports: %+v, want used 42 exactly", st)
		}
		if n := ledgerRows(t, s, r, "FINISHED"); n != 2 {
			t.Fatalf("%d FINISHED ledger rows, want 2 (one per fail-open lease)", n)
		}
	})
}
