package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// With Redis cut, a failMode OPEN policy lets the request through and the
// ledger keeps its charge (reconciliation puts it back in the balance); a
// CLOSED one answers UNAVAILABLE, or OVER_LIMIT with fail_closed_answer:
// over_limit, and a request with both policies is closed.
func TestDeadRedisFollowsEachPolicysFailMode(t *testing.T) {
	for _, answer := range []string{"unavailable", "over_limit"} {
		t.Run(answer, func(t *testing.T) {
			testenv.MustRedis(t)
			proxy, err := faults.StartProxy(testenv.RedisAddr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			open, closed := testenv.Resource(t), testenv.Resource(t)
			g := startGW(t, testenv.Real, fmt.Sprintf(`
fail_closed_answer: %s
domains:
  - domain: d
    descriptors:
      - {key: k, value: open, resource: %s}
      - {key: k, value: closed, resource: %s}
`, answer, open, closed), "--redis-addr", proxy.Addr(), "--reconcile-settle", "200ms", "--reconcile-interval", "1h")
			g.policy(t, open, 100, map[string]any{"failMode": "OPEN"})
			g.policy(t, closed, 100, map[string]any{"failMode": "CLOSED"})
			g.must(t, "d", desc(1, "k", "open"))
			g.must(t, "d", desc(1, "k", "closed"))

			proxy.Suspend()
			if resp := g.must(t, "d", desc(2, "k", "open")); codesOf(resp) != "OK OK" {
				t.Fatalf("OPEN policy with Redis down: %v", resp)
			}
			for _, ds := range [][]string{{"closed"}, {"open", "closed"}} {
				var req []*rlcommon.RateLimitDescriptor
				for _, v := range ds {
					req = append(req, desc(1, "k", v))
				}
				resp, err := g.ask(t, "", "d", req...)
				switch answer {
				case "unavailable":
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("%v with Redis down: %v %v, want UNAVAILABLE", ds, resp, err)
					}
				default:
					if err != nil || resp.GetOverallCode() != over {
						t.Fatalf("%v with Redis down: %v %v, want OVER_LIMIT", ds, resp, err)
					}
				}
			}
			if err := proxy.Resume(); err != nil {
				t.Fatal(err)
			}
			if charged, rows := g.ledgerCharged(t, open); charged != 3 || rows != 2 {
				t.Fatalf("ledger of the OPEN resource: %d in %d rows, want 3 in 2 (the fail-open charge recorded)", charged, rows)
			}
			if charged, _ := g.ledgerCharged(t, closed); charged != 1 {
				t.Fatalf("ledger of the CLOSED resource: %d, want 1", charged)
			}
			// Reconciliation brings the live balance to the ledger's.
			testenv.Eventually(t, 30*time.Second, "the fail-open charge reconciled into Redis", func() bool {
				g.httpCall(t, http.MethodPost, "/admin/reconcile?resourceName="+open, nil)
				u, _ := g.used(t, open)
				return u == 3
			})
		})
	}
}

// The charges' ledger rows rebuild the balance exactly: after Redis lost
// the resource's keys, the balance seeded from the ledger is what it was.
func TestBalanceRebuildsFromTheChargesInTheLedger(t *testing.T) {
	g, r := startOne(t, testenv.Real, 1000, "usage: true")
	for _, hits := range []int64{0, 120, 7, 0, 990} {
		g.must(t, "d", desc(hits, "k", "v"))
	}
	before, remBefore := g.used(t, r)
	if before != 1117 || remBefore != -117 {
		t.Fatalf("used %d remaining %d, want 1117 and -117", before, remBefore)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "qc:{"+r+"}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %v %v", r, keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	after, remAfter := g.used(t, r)
	if after != before || remAfter != remBefore {
		t.Fatalf("rebuilt: used %d remaining %d, want %d and %d", after, remAfter, before, remBefore)
	}
	// And the next check sees the rebuilt balance.
	if resp := g.must(t, "d", desc(0, "k", "v")); resp.GetOverallCode() != over {
		t.Fatalf("check after the rebuild: %v", resp)
	}
}
