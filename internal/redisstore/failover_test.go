package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testcluster"
)

// privateCluster starts a fresh cluster on ports base..base+5 (the failover
// tests use 7100 and 7200; the shared test cluster is on 7000-7005) with a
// short cluster-node-timeout (a dead master is replaced within a few
// seconds) and stops it, removing its data, when the test ends.
func privateCluster(t *testing.T, base int) (*redis.ClusterClient, string) {
	t.Helper()
	dir := t.TempDir()
	_ = testcluster.Stop(base, dir)
	if err := testcluster.Start(base, dir, "QC_REDIS_CLUSTER_NODE_TIMEOUT=1000"); err != nil {
		if testcluster.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Cleanup(func() {
		if err := testcluster.Stop(base, dir); err != nil {
			t.Errorf("stop the private cluster: %v", err)
		}
	})
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: testcluster.Ports(base), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: 2, PoolSize: 64,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, dir
}

// masterOf returns the address of the master serving key's slot.
func masterOf(t *testing.T, rdb *redis.ClusterClient, key string) string {
	t.Helper()
	slot, err := rdb.ClusterKeySlot(ctxT(t), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := clusterMasters(ctxT(t), rdb)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.start <= slot && slot <= s.end {
			return s.addr
		}
	}
	t.Fatalf("no master for slot %d", slot)
	return ""
}

// failoverLoss is what a promoted replica lacked of the calls answered
// before its master was killed.
type failoverLoss struct {
	applies, finishes   int // answered
	shortBeforeKill     int // answered with fewer replica acknowledgements than asked, before the kill
	lostApplies         int // answered grants whose session the new master lacks
	finishNotFound      int // finishes refused as not found: their apply was lost
	revertedFinishes    int // answered finishes the new master shows USING again
	driftCharged, drift int64
	// the drift whole lost calls make: what the model counts for the
	// sessions the new master lacks or shows unfinished
	wantDriftCharged, wantDrift int64
}

// killMasterUnderLoad runs applies and finishes on one resource of the
// private cluster through a pipelined Store (with w), kills -9 the master
// holding the resource meanwhile, keeps going until its replica answers,
// and compares what the new master holds with every answered call.
func killMasterUnderLoad(t *testing.T, base int, w Wait) failoverLoss {
	rdb, dir := privateCluster(t, base)
	var shortMu sync.Mutex
	short := 0       // calls answered short of a replica
	var killedAt int // short when the master was killed
	w.OnShort = func(n int) {
		shortMu.Lock()
		short += n
		shortMu.Unlock()
	}
	s := NewPipelined(rdb, Pipelining{MaxCalls: 32, InFlight: 4, Timeout: 500 * time.Millisecond}).WithWait(w)
	t.Cleanup(s.Close)
	res := "failover-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	now, err := rdb.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	per := quota.Period{Start: now.Add(-time.Hour).Truncate(time.Millisecond), End: now.Add(time.Hour).Truncate(time.Millisecond)}
	if _, err := s.Seed(ctxT(t), res, per, 1<<40, quota.PeriodTotals{}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	master := masterOf(t, rdb, limitKey(res))
	port, _ := strconv.Atoi(master[strings.LastIndex(master, ":")+1:])
	pid, err := testcluster.PID(base, port, dir)
	before, err2 := s.Masters(ctxT(t), []string{res})
	if err2 != nil || before[res] == "" {
		t.Fatalf("Masters before: %v, %v", before, err2)
	}
	if err != nil {
		t.Fatal(err)
	}

	var lastErr atomic.Value
	var stoppedAt atomic.Int64 // when stop was closed, in Unix nanoseconds
	var (
		mu             sync.Mutex
		granted        = map[string]bool{} // answered applies
		finishNotFound int                 // finishes of an answered apply the new master lacks
		finished       = map[string]bool{} // answered finishes
		stop           = make(chan struct{})
		wg             sync.WaitGroup
	)
	// retry repeats a call until it is answered (every script is
	// idempotent by session id, as a client's retry is), or the test ends.
	retry := func(call func(ctx context.Context) error) bool {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := call(ctx)
			cancel()
			if err == nil {
				return true
			}
			if !errors.Is(err, quota.ErrUnavailable) {
				t.Errorf("call: %v", err)
				return false
			}
			lastErr.Store(err.Error())
			select {
			case <-stop:
				// A call that failed may still have run (a timeout under
				// load): its outcome is unknown, so it is retried until
				// answered (the cluster answers again by now) and counted;
				// abandoning it left a reservation no answer accounts for
				// (seen in CI: reserved +20 with nothing lost).
				if time.Since(time.Unix(0, stoppedAt.Load())) > 30*time.Second {
					t.Errorf("call still failing 30 s after the load stopped: %v", err)
					return false
				}
			default:
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for wk := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", wk, i)
				if !retry(func(ctx context.Context) error {
					r, err := s.Apply(ctx, quota.ApplyCmd{ResourceName: res, SessionID: id, ClientID: "c",
						Amount: 10, Period: per, Lease: 10 * time.Minute})
					if err == nil && r.Outcome != quota.ApplyGranted && r.Outcome != quota.ApplyReplayed {
						err = fmt.Errorf("apply %s: outcome %d", id, r.Outcome)
					}
					return err
				}) {
					return
				}
				mu.Lock()
				granted[id] = true
				mu.Unlock()
				if i%2 == 1 {
					continue
				}
				notFound := false
				if !retry(func(ctx context.Context) error {
					_, err := s.Finish(ctx, quota.FinishCmd{ResourceName: res, SessionID: id, ClientID: "c", Actual: 4, Retention: time.Hour})
					if errors.Is(err, quota.ErrSessionNotFound) {
						notFound, err = true, nil // its apply was lost with the old master
					}
					return err
				}) {
					return
				}
				if notFound {
					mu.Lock()
					finishNotFound++
					mu.Unlock()
					continue
				}
				mu.Lock()
				finished[id] = true
				mu.Unlock()
			}
		})
	}
	// Kill the master once the load runs, then let it run until calls are
	// answered again on the promoted replica.
	testPoll(t, 10*time.Second, "the first 200 answered applies", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(granted) >= 200
	})
	shortMu.Lock()
	killedAt = short
	shortMu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the master %s (pid %d): %v", master, pid, err)
	}
	mu.Lock()
	atKill := len(granted)
	mu.Unlock()
	defer func() {
		if t.Failed() {
			t.Logf("last unavailable error: %v", lastErr.Load())
		}
	}()
	testPoll(t, 30*time.Second, "applies answered again after the failover", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(granted) >= atKill+200
	})
	stoppedAt.Store(time.Now().UnixNano())
	close(stop)
	wg.Wait()
	if newMaster := masterOf(t, rdb, limitKey(res)); newMaster == master {
		t.Fatalf("the slot is still served by the killed master %s", master)
	}
	// The failover watcher's view: the resource's master changed.
	if after, err := s.Masters(ctxT(t), []string{res}); err != nil || after[res] == "" || after[res] == before[res] {
		t.Fatalf("Masters after the failover: %v (%v), before: %v", after, err, before)
	}

	// What does the new master hold?
	mu.Lock()
	defer mu.Unlock()
	loss := failoverLoss{applies: len(granted), finishes: len(finished), shortBeforeKill: killedAt, finishNotFound: finishNotFound}
	ids := make([]string, 0, len(granted))
	for id := range granted {
		ids = append(ids, id)
	}
	held, err := s.Sessions(ctxT(t), res, ids)
	if err != nil {
		t.Fatal(err)
	}
	var charged, reserved int64
	for _, id := range ids {
		st, ok := held[id]
		switch {
		case !ok:
			loss.lostApplies++
			// The model counts it, Redis does not: its whole contribution is missing.
			if finished[id] {
				loss.wantDriftCharged -= 4
			} else {
				loss.wantDrift -= 10
			}
		case finished[id] && st.Status != quota.StatusFinished:
			loss.revertedFinishes++
			loss.wantDriftCharged -= 4 // its usage is not charged
			loss.wantDrift += 10       // its grant is still reserved
		}
		if finished[id] {
			charged += 4
		} else {
			reserved += 10
		}
	}
	b, err := s.Balance(ctxT(t), res, per)
	if err != nil {
		t.Fatal(err)
	}
	loss.driftCharged, loss.drift = b.Charged-charged, b.Reserved-reserved
	t.Logf("WAIT %d replica(s): %d applies and %d finishes answered (%d before the kill short of a replica); the new master lacks %d applies (%d of them found by a finish) and %d finishes; balance drift charged %+d reserved %+d",
		w.Replicas, loss.applies, loss.finishes, loss.shortBeforeKill, loss.lostApplies, loss.finishNotFound, loss.revertedFinishes, loss.driftCharged, loss.drift)
	return loss
}

func testPoll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A master killed under load: with Wait, its promoted replica holds every
// call that its replica acknowledged before the answer, so it loses at most
// the calls answered short of an acknowledgement (none on a healthy
// cluster), and the balance matches the answered calls.
func TestFailoverWithWaitLosesNoAcknowledgedCall(t *testing.T) {
	t.Parallel()
	loss := killMasterUnderLoad(t, 7100, Wait{Replicas: 1, Timeout: 200 * time.Millisecond})
	if lost := loss.lostApplies + loss.revertedFinishes; lost > loss.shortBeforeKill {
		t.Fatalf("with WAIT the new master lost %d answered calls, %d were answered short of a replica: %+v", lost, loss.shortBeforeKill, loss)
	}
	if loss.shortBeforeKill == 0 && (loss.driftCharged != 0 || loss.drift != 0) {
		t.Fatalf("with WAIT the new master's balance drifted: %+v", loss)
	}
}

// Without Wait, a failover may lose the last answered calls. A script's
// writes replicate as one unit, so what is lost is whole calls: a lost
// apply takes its reservation with it (Redis under-counts until the
// failover watcher rebuilds the resource from the ledger), a lost finish
// leaves the grant reserved instead of the usage charged.
func TestFailoverWithoutWaitLosesWholeCallsOnly(t *testing.T) {
	t.Parallel()
	loss := killMasterUnderLoad(t, 7200, Wait{})
	if loss.driftCharged != loss.wantDriftCharged || loss.drift != loss.wantDrift {
		t.Fatalf("the balance drift is not that of whole lost calls: %+v", loss)
	}
}
