package policysync_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/quotacenter/quota-center/internal/policysync"
	"github.com/quotacenter/quota-center/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seen records the resources a bus was told to forget.
type seen struct {
	mu  sync.Mutex
	got map[string]int
}

func (s *seen) forget(r string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got == nil {
		s.got = map[string]int{}
	}
	s.got[r]++
}

func (s *seen) count(r string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[r]
}

func run(t *testing.T, b *policysync.Bus) {
	t.Helper()
	stop, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// A change announced by one instance reaches every instance's forget
// functions (the announcer's too), on one Redis and on a cluster (where
// PUBLISH reaches every node). Other tests and servers publish on the same
// channel: only this test's resource is counted.
func TestAChangeReachesEveryInstance(t *testing.T) {
	for _, mode := range []testenv.Mode{testenv.Real, testenv.Cluster} {
		t.Run(string(mode), func(t *testing.T) {
			var a, b1, b2 seen
			busA := policysync.New(testenv.RedisClient(t, mode), zap.NewNop(), a.forget)
			busB := policysync.New(testenv.RedisClient(t, mode), zap.NewNop(), b1.forget, b2.forget)
			run(t, busA)
			run(t, busB)
			res := testenv.Resource(t)
			busA.Changed(context.Background(), res)
			testenv.Eventually(t, 10*time.Second, "both instances to hear of the change", func() bool {
				return a.count(res) == 1 && b1.count(res) == 1 && b2.count(res) == 1
			})
			if other := testenv.Resource(t); a.count(other)+b1.count(other) != 0 {
				t.Fatalf("a resource nobody changed was forgotten")
			}
		})
	}
}

// Without Redis a change is not announced: the failure is logged and the
// caller goes on (the change itself is stored; the TTL bounds the rest);
// subscribing reports an error, not a hang, and keeps trying until stopped.
func TestNoRedisIsLoggedNotFatal(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	core, logs := observer.New(zap.WarnLevel)
	bus := policysync.New(rdb, zap.New(core))
	bus.Changed(context.Background(), "gpu")
	if logs.FilterField(zap.String("resource", "gpu")).Len() != 1 {
		t.Fatalf("logs %v: want one warning naming the resource", logs.All())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stop, err := bus.Run(ctx)
	stop() // goleak: the retrying goroutine ends
	if err == nil {
		t.Fatal("subscribing without Redis succeeded")
	}
}
