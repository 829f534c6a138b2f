package app_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/testcluster"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// loseRedis deletes every Redis key of resource r (its balances, sessions,
// pools, grants, locks), as a Redis that lost its data would have none.
func loseRedis(t *testing.T, mode testenv.Mode, r string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := testenv.RedisClient(t, mode)
	keys, err := testcluster.ScanKeys(ctx, c, "qc:{"+r+"}:*")
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err() // one slot
	}
	if err != nil || len(keys) == 0 {
		t.Fatalf("lose %s's Redis keys: %d keys, %v", r, len(keys), err)
	}
}

// poolLine is one line of GET /quota/status's pools.
type poolLine struct{ used, borrowed, borrowLimit, mayUse int64 }

func poolLines(t *testing.T, s *testenv.Server, r string) (map[string]poolLine, int64) {
	t.Helper()
	_, out := getStatus(t, s, r)
	p, ok := out["pools"].(map[string]any)
	if !ok {
		t.Fatalf("status has no pools: %v", out)
	}
	lines := map[string]poolLine{}
	for _, x := range p["lines"].([]any) {
		l := x.(map[string]any)
		lines[l["businessLine"].(string)] = poolLine{used: num(t, l, "used"), borrowed: num(t, l, "borrowed"),
			borrowLimit: num(t, l, "borrowLimit"), mayUse: num(t, l, "mayUse")}
	}
	return lines, num(t, p, "sharedUsed")
}

// ledgerPools is what each line holds of each pool by the ledger: every
// row's drawn split, settled (pools.Settle) for finished rows.
func ledgerPools(t *testing.T, s *testenv.Server, r string) map[string]pools.Drawn {
	t.Helper()
	rows, err := s.Ledger.Query(`SELECT business_line, status, granted_amount, charged_amount,
		drawn_dedicated, drawn_shared, drawn_buffer, drawn_grant, drawn_grants FROM quota_usage WHERE resource_name = ?`, r)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]pools.Drawn{}
	for rows.Next() {
		var line, st, gs string
		var granted, charged int64
		var d pools.Drawn
		if err := rows.Scan(&line, &st, &granted, &charged, &d.Dedicated, &d.Shared, &d.Buffer, &d.Grant, &gs); err != nil {
			t.Fatal(err)
		}
		d.Grants = pools.ParseGrants(gs)
		if st == "FINISHED" {
			d = pools.Settle(d, granted, charged, true)
		}
		t2 := out[line]
		t2.Dedicated, t2.Shared, t2.Buffer, t2.Grant = t2.Dedicated+d.Dedicated, t2.Shared+d.Shared, t2.Buffer+d.Buffer, t2.Grant+d.Grant
		out[line] = t2
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTwoInstancesKeepThePoolInvariants: two services on one Redis and one
// MySQL take concurrent applies and finishes on the lines of one resource
// (with a temporary grant and buffer released to a line), and issue 13 §6
// holds: never more held than the limit plus the grant; no line past its
// dedicated part, borrowing limit and buffer lent; a CORE critical apply
// never refused by a watermark; refunds back in the pools they came from
// (Redis' counters, read through either instance, equal the ledger's
// split), also after Redis lost all of the resource's keys halfway.
func TestTwoInstancesKeepThePoolInvariants(t *testing.T) {
	for _, m := range testenv.Modes() {
		t.Run(string(m), func(t *testing.T) {
			a, b := twoInstances(t, m)
			via := []*testenv.Server{a, b}
			r := sharedResource(t)
			const limit, grant, released = 10_000, 500, 200
			putPolicy(t, a, r, map[string]any{"quotaType": "TOKENS", "totalLimit": limit,
				"pools": map[string]any{"sharedPercent": 60, "dedicatedPercent": 30, "bufferPercent": 10, "borrowLimitPercent": 100, "elasticity": "OFF"}})
			for _, l := range []struct {
				name, tier string
				weight     int
			}{{"core", "CORE", 2}, {"growth", "GROWTH", 1}, {"explore", "EXPLORE", 1}} {
				if code, out, _ := call(t, b, http.MethodPut, "/admin/policies/"+r+"/lines/"+l.name, map[string]any{"tier": l.tier, "weight": l.weight}); code/100 != 2 {
					t.Fatalf("line %s: %d %v", l.name, code, out)
				}
			}
			exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			if code, out, _ := call(t, a, http.MethodPost, "/admin/policies/"+r+"/grants", map[string]any{"amount": grant, "expiresAt": exp, "reason": "test"}); code != 201 {
				t.Fatalf("grant: %d %v", code, out)
			}
			if code, out, _ := call(t, b, http.MethodPost, "/admin/policies/"+r+"/buffer/release", map[string]any{"amount": released, "businessLine": "explore", "reason": "test"}); code != 201 {
				t.Fatalf("release: %d %v", code, out)
			}
			// Both instances know the lines and the grant (the policy+pools cache)
			// before the burst.
			testenv.Eventually(t, 10*time.Second, "both instances see the grant", func() bool {
				for _, s := range via {
					if code, _ := callRetry(t, s, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 1, "businessLine": "core",
						"sessionId": fmt.Sprintf("warm-%p-%d", s, time.Now().UnixNano())}); code != 200 {
						return false
					}
				}
				return true
			})

			lines := []string{"core", "growth", "explore"}
			var mu sync.Mutex
			var open []string
			codes := map[int]int{}
			var wg sync.WaitGroup
			const n = 300
			for i := range n {
				wg.Go(func() {
					s := via[i%2]
					line := lines[(i*7)%3]
					critical := i%5 != 0
					id := fmt.Sprintf("pool-%03d", i)
					code, out := callRetry(t, s, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 20 + (i*37)%90,
						"businessLine": line, "sessionId": id, "critical": critical, "continuation": i%4 == 0})
					mu.Lock()
					codes[code]++
					mu.Unlock()
					switch {
					case code == http.StatusOK && i%3 != 0:
						// The other instance finishes it, with a refund.
						g := num(t, out, "grantedAmount")
						if c, out := callRetry(t, via[(i+1)%2], "/quota/finish", map[string]any{"resourceName": r, "sessionId": id,
							"actualUsedAmount": g * int64(i%4) / 4}); c != 200 {
							t.Errorf("finish %s: %d %v", id, c, out)
						}
					case code == http.StatusOK:
						mu.Lock()
						open = append(open, id)
						mu.Unlock()
					case code == http.StatusTooManyRequests:
						if line == "core" && critical && out["reason"] == "WATERMARK" {
							t.Errorf("a CORE critical apply refused by the watermark: %v", out)
						}
					default:
						t.Errorf("apply %s: %d %v", id, code, out)
					}
				})
			}
			wg.Wait()
			if codes[http.StatusOK] == 0 || codes[http.StatusTooManyRequests] == 0 {
				t.Fatalf("codes %v: the burst must both grant and refuse", codes)
			}
			check := func(when string) {
				t.Helper()
				led := ledgerPools(t, a, r)
				var held int64
				for _, d := range led {
					held += d.Total()
				}
				if held > limit+grant {
					t.Fatalf("%s: the ledger holds %d, past the limit %d + the grant %d", when, held, limit, grant)
				}
				la, sharedA := poolLines(t, a, r)
				lb, sharedB := poolLines(t, b, r)
				if fmt.Sprint(la, sharedA) != fmt.Sprint(lb, sharedB) {
					t.Fatalf("%s: the instances disagree:\n%v %d\n%v %d", when, la, sharedA, lb, sharedB)
				}
				var shared int64
				for name, l := range la {
					d := led[name]
					if l.used != d.Dedicated+d.Shared+d.Buffer+d.Grant || l.borrowed != d.Shared {
						t.Fatalf("%s: line %s in Redis %+v, in the ledger %+v", when, name, l, d)
					}
					if d.Dedicated+d.Shared+d.Buffer > l.mayUse || l.borrowed > sharedA {
						t.Fatalf("%s: line %s holds %+v, past what it may use %+v", when, name, d, l)
					}
					shared += d.Shared
				}
				if shared != sharedA {
					t.Fatalf("%s: shared pool %d in Redis, %d by the lines in the ledger", when, sharedA, shared)
				}
			}
			check("after the burst")
			// Redis loses everything of the resource: the next apply (through
			// either instance) rebuilds the layout, the release, the grant and
			// the counters from the ledger, and the open sessions with their
			// split, whose finishes then refund the pools they drew from.
			loseRedis(t, m, r)
			if c, out := callRetry(t, b, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 1, "businessLine": "growth",
				"sessionId": "after-loss", "continuation": true}); c != 200 {
				t.Fatalf("apply after the loss: %d %v", c, out)
			}
			check("after Redis lost the resource")
			for i, id := range open {
				if c, out := callRetry(t, via[i%2], "/quota/finish", map[string]any{"resourceName": r, "sessionId": id, "actualUsedAmount": 0}); c != 200 {
					t.Fatalf("finish %s: %d %v", id, c, out)
				}
			}
			check("after every finish")
		})
	}
}
