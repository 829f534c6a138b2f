package sdktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestThreeManagersWithLocalPoolsStayWithinTheBoundAndEndExact: three
// independent Managers (each its own HTTP client and connections), each
// with a LocalPool of max batch 100 and 6 goroutines taking and reserving
// with overage, on one center. At every moment the center holds
// (used + reserved) at most what was handed out plus 3 × 100; once every
// pool is closed, usedAmount is exactly what was handed out.
func TestThreeManagersWithLocalPoolsStayWithinTheBoundAndEndExact(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		const instances, maxBatch, workers, ops = 3, 100, 6, 400
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 10_000_000})
		var handed, attempted atomic.Int64 // attempted: counted before a take, so it is never below handed
		var pools []*client.LocalPool
		for range instances {
			m := manager(t, s.URL)
			p, err := m.LocalPool(r, client.WithBatch(50, 10, maxBatch), client.WithTargetPeriod(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			pools = append(pools, p)
		}
		watch := watchBound(t, s, r, attempted.Load)
		var wg sync.WaitGroup
		errs := make(chan error, instances*workers)
		for _, p := range pools {
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := poolWork(p, rand.New(rand.NewPCG(uint64(w), 7)), ops, w%2 == 0, func(n int64) { attempted.Add(n) }, false)
					handed.Add(n)
					if err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("take: %v", err)
		}
		watch.check(t, instances*maxBatch)
		for _, p := range pools {
			if err := p.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
		}
		st := status(t, s, r)
		if st.UsedAmount != handed.Load() || st.ReservedAmount != 0 || st.ActiveSessions != 0 {
			t.Fatalf("after closing every pool: %+v, want usedAmount %d exactly", st, handed.Load())
		}
		t.Logf("handed %d units; the center held at most %d beyond that (bound %d)", handed.Load(), watch.worst.Load(), instances*maxBatch)
	})
}

// helperEnv carries the center's URL and resource to the child process of
// TestKilledProcessIsChargedTheBatchByTheLeakSweeper.
const helperEnv = "QC_SDKTEST_KILLED_POOL"

// TestKilledPoolProcess is the child: it takes from a pool, says how big
// its batch is, and waits to be killed.
func TestKilledPoolProcess(t *testing.T) {
	arg := os.Getenv(helperEnv)
	if arg == "" {
		t.Skip("helper process of TestKilledProcessIsChargedTheBatchByTheLeakSweeper")
	}
	var url, r string
	if _, err := fmt.Sscanf(arg, "%s %s", &url, &r); err != nil {
		t.Fatal(err)
	}
	m, err := client.NewManager(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.LocalPool(r, client.WithBatch(80, 80, 80))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Take(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("TOOK 3 HOLDING %d\n", p.Available())
	time.Sleep(time.Minute)
}

func TestKilledProcessIsChargedTheBatchByTheLeakSweeper(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000, LeakThresholdSeconds: 1})
		kid := startChild(t, "TestKilledPoolProcess", helperEnv+"="+s.URL+" "+r)
		if l := kid.waitLine(t, "TOOK "); l != "TOOK 3 HOLDING 77" {
			t.Fatalf("the child said %q", l)
		}
		if st := status(t, s, r); st.ReservedAmount != 80 || st.ActiveSessions != 1 {
			t.Fatalf("the child's batch at the center: %+v", st)
		}
		kid.kill() // SIGKILL: no Close, no finish
		testenv.Eventually(t, 20*time.Second, "the leak sweeper to charge the batch", func() bool {
			st := status(t, s, r)
			return st.ActiveSessions == 0 && st.UsedAmount == 80 && st.ReservedAmount == 0
		})
		if n := ledgerRows(t, s, r, "LEAKED"); n != 1 {
			t.Fatalf("%d LEAKED ledger rows, want 1", n)
		}
	})
}

func TestPoolBacksOffOn429AndRecoversWhenTheLimitRises(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 30})
	m := manager(t, s.URL)
	p, err := m.LocalPool(r, client.WithBatch(20, 20, 20))
	if err != nil {
		t.Fatal(err)
	}
	taken := int64(0)
	var err429 error
	for taken <= 30 {
		if err429 = p.Take(context.Background(), 1); err429 != nil {
			break
		}
		taken++
	}
	if !errors.Is(err429, client.ErrQuotaExhausted) || taken != 30 {
		t.Fatalf("took %d of 30 then %v, want ErrQuotaExhausted after exactly 30", taken, err429)
	}
	if p.Mode() != "exhausted" {
		t.Fatalf("mode %q, want exhausted", p.Mode())
	}
	if _, err := admin(t, s).PutPolicy(context.Background(), client.PolicySpec{ResourceName: r, QuotaType: client.QuotaTypeTokens, TotalLimit: 1000}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 40*time.Second, "takes to succeed after the limit rose", func() bool {
		return p.Take(context.Background(), 1) == nil
	})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := status(t, s, r); st.UsedAmount != 31 || st.ReservedAmount != 0 {
		t.Fatalf("after close: %+v, want used 31", st)
	}
}

func TestPoolOutageSafeRateIsChargedOnceTheCenterIsBack(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 100_000})
		p := newProxy(t, s.URL)
		m := manager(t, p.URL, client.WithRetry(1, time.Millisecond, time.Millisecond), client.WithReportInterval(50*time.Millisecond),
			client.WithBreaker(1000, time.Second))
		pool, err := m.LocalPool(r, client.WithBatch(10, 10, 10), client.WithOutage(client.OutageSafeRate, 1000))
		if err != nil {
			t.Fatal(err)
		}
		deny, err := m.LocalPool(r, client.WithBatch(10, 10, 10))
		if err != nil {
			t.Fatal(err)
		}
		p.down.Store(true)
		if err := deny.Take(context.Background(), 1); !errors.Is(err, client.ErrUnavailable) || deny.Mode() != "deny" {
			t.Fatalf("deny pool while down: %v, mode %q", err, deny.Mode())
		}
		var handed int64
		for handed < 200 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := pool.Take(ctx, 5)
			cancel()
			if err != nil {
				t.Fatalf("safe-rate take while down: %v (mode %q)", err, pool.Mode())
			}
			handed += 5
		}
		if pool.Mode() != "safe_rate" {
			t.Fatalf("mode %q, want safe_rate", pool.Mode())
		}
		p.down.Store(false)
		testenv.Eventually(t, 20*time.Second, "the pool to leave outage mode", func() bool {
			if err := pool.Take(context.Background(), 1); err != nil {
				return false
			}
			handed++
			return pool.Mode() == "normal"
		})
		if err := pool.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := deny.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 20*time.Second, "the safe-rate usage to be reported", func() bool { return m.PendingReports() == 0 })
		if st := status(t, s, r); st.UsedAmount != handed || st.ReservedAmount != 0 {
			t.Fatalf("after the outage: %+v, want used %d exactly", st, handed)
		}
	})
}

// TestPoolBatchSweptDuringAnOutageIsTruedUpToWhatWasHandedOut: the
// center sweeps a batch whose heartbeats do not arrive (charging it whole);
// once heartbeats arrive again the pool learns the session ended, stops
// serving the batch and finishes it with the units it handed out, which a
// late finish trues up.
func TestPoolBatchSweptDuringAnOutageIsTruedUpToWhatWasHandedOut(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000, LeakThresholdSeconds: 2})
		p := newProxy(t, s.URL)
		m := manager(t, p.URL, client.WithRetry(1, time.Millisecond, time.Millisecond), client.WithBreaker(1000, time.Second))
		pool, err := m.LocalPool(r, client.WithBatch(100, 100, 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := pool.Take(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
		p.hbOff.Store(true)
		testenv.Eventually(t, 20*time.Second, "the center to sweep the batch", func() bool {
			st := status(t, s, r)
			return st.ActiveSessions == 0 && st.UsedAmount == 100
		})
		p.hbOff.Store(false)
		testenv.Eventually(t, 20*time.Second, "the late finish to true the batch up", func() bool {
			return status(t, s, r).UsedAmount == 10
		})
		if err := pool.Take(context.Background(), 5); err != nil { // from a fresh batch
			t.Fatal(err)
		}
		if err := pool.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := status(t, s, r); st.UsedAmount != 15 || st.ReservedAmount != 0 {
			t.Fatalf("after close: %+v, want used 15", st)
		}
	})
}

// TestStaleBatchIsReturnedWhenThePolicyVersionChanges: a limit change, a
// period reset, a temporary grant and a line change each change the policy
// version in the heartbeat answers; the pool returns the batch it holds
// (finished with what it handed out) and fetches a fresh one under the new
// version. The pool's batches are of business line "a" (a resource with
// lines a and, for the line case, b).
func TestStaleBatchIsReturnedWhenThePolicyVersionChanges(t *testing.T) {
	changes := []struct {
		name string
		// serverPending: the version change comes from the pools' part of
		// internal/quota/version.go; the case first checks, with a plain
		// probe session, that the server changed it, and fails if not.
		serverPending bool
		change        func(t *testing.T, s *testenv.Server, spec client.PolicySpec)
	}{
		{"limit", false, func(t *testing.T, s *testenv.Server, spec client.PolicySpec) {
			spec.TotalLimit = 500
			if _, err := admin(t, s).PutPolicy(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
		}},
		{"reset", false, func(t *testing.T, s *testenv.Server, spec client.PolicySpec) {
			if _, err := admin(t, s).ResetPeriod(context.Background(), spec.ResourceName, "sdktest"); err != nil {
				t.Fatal(err)
			}
		}},
		{"grant", true, func(t *testing.T, s *testenv.Server, spec client.PolicySpec) {
			exp := time.Now().Add(time.Hour)
			if _, err := admin(t, s).GrantQuota(context.Background(), spec.ResourceName, client.GrantRequest{Amount: 300, BusinessLine: "a", ExpiresAt: &exp, Reason: "sdktest"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"line", true, func(t *testing.T, s *testenv.Server, spec client.PolicySpec) {
			putLine(t, s, spec.ResourceName, "b")
		}},
	}
	forModes(t, func(t *testing.T, s *testenv.Server) {
		for _, ch := range changes {
			t.Run(ch.name, func(t *testing.T) {
				ctx := context.Background()
				spec := client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000, LeakThresholdSeconds: 3}
				spec.ResourceName = policy(t, s, spec)
				adm := admin(t, s)
				putLine(t, s, spec.ResourceName, "a")
				var probe *client.ApplyResponse
				if ch.serverPending { // a plain session, to see whether the server changes the version
					var err error
					if probe, err = adm.Apply(ctx, client.ApplyRequest{ResourceName: spec.ResourceName, ApplyAmount: 1, BusinessLine: "a"}); err != nil {
						t.Fatal(err)
					}
					defer func() {
						_, _ = adm.Finish(ctx, client.FinishRequest{ResourceName: spec.ResourceName, SessionID: probe.SessionID})
					}()
				}
				m := manager(t, s.URL)
				pool, err := m.LocalPool(spec.ResourceName, client.WithBatch(100, 100, 100), client.WithLine("a"))
				if err != nil {
					t.Fatal(err)
				}
				if err := pool.Take(ctx, 10); err != nil {
					t.Fatal(err)
				}
				ch.change(t, s, spec)
				if probe != nil && !versionChanges(t, adm, spec.ResourceName, probe) {
					t.Fatalf("the server did not change policyVersion on a %s (internal/quota/version.go, the pools' part)", ch.name)
				}
				// The stale batch is finished with its 10 (a reset leaves
				// it in the old period) and a fresh one of 100 is held.
				testenv.Eventually(t, 30*time.Second, "the stale batch to be returned and a fresh one fetched", func() bool {
					return ledgerRows(t, s, spec.ResourceName, "FINISHED") == 1 && pool.Available() == 100
				})
				probes := int64(0) // the probe session still open (1 unit)
				if probe != nil {
					probes = 1
				}
				st := status(t, s, spec.ResourceName)
				if st.ActiveSessions != 1+probes || st.ReservedAmount != 100+probes {
					t.Fatalf("after the change: %+v, want one fresh batch of 100 (and the probe's 1)", st)
				}
				if err := pool.Take(ctx, 4); err != nil {
					t.Fatal(err)
				}
				if err := pool.Close(ctx); err != nil {
					t.Fatal(err)
				}
				st = status(t, s, spec.ResourceName)
				want := int64(14)
				if ch.name == "reset" {
					want = 4 // the stale batch's 10 were charged in the period before the reset
				}
				if st.UsedAmount != want || st.ReservedAmount != probes {
					t.Fatalf("after close: %+v, want used %d", st, want)
				}
			})
		}
	})
}

// versionChanges heartbeats the probe session until its policy version
// differs from the apply's, for up to 5 s (the policy cache's TTL in
// tests is shorter).
func versionChanges(t *testing.T, c *client.Client, r string, probe *client.ApplyResponse) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		hb, err := c.Heartbeat(context.Background(), client.HeartbeatRequest{ResourceName: r, SessionID: probe.SessionID})
		if err != nil {
			t.Fatal(err)
		}
		if hb.PolicyVersion != probe.PolicyVersion {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// putLine adds business line name (weight 1) to resource r.
func putLine(t *testing.T, s *testenv.Server, r, name string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.URL+"/admin/policies/"+r+"/lines/"+name, strings.NewReader(`{"tier":"GROWTH","weight":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("put line %s: %s %s", name, resp.Status, b)
	}
}

func TestIdlePoolReturnsItsUnusedUnits(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000})
	m := manager(t, s.URL)
	p, err := m.LocalPool(r, client.WithBatch(100, 100, 100), client.WithIdleReturn(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Take(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the idle pool to return its batch", func() bool {
		st := status(t, s, r)
		return st.ActiveSessions == 0 && st.UsedAmount == 7 && st.ReservedAmount == 0
	})
	if p.Available() != 0 {
		t.Fatalf("idle pool still offers %d units", p.Available())
	}
	if err := p.Take(context.Background(), 2); err != nil { // a new batch
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := status(t, s, r); st.UsedAmount != 9 {
		t.Fatalf("used %d, want 9", st.UsedAmount)
	}
	_ = strconv.Itoa
}
