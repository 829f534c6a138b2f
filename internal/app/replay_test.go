package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestReplayNeverHandsOutALeaseThatIsOver reproduces issue 11 §3.2: a retry
// of an apply whose first answer was lost (its instance died) got 200 with
// the original lease, already over, and its first heartbeat was 409 LEAKED.
// Now a replay whose lease is over renews the session when it is still
// USING (the answer's lease is in the future and a heartbeat works), and
// answers 409 SESSION_NOT_ACTIVE with the status when it was swept.
func TestReplayNeverHandsOutALeaseThatIsOver(t *testing.T) {
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			apply := func(s *testenv.Server, r, id string) (int, map[string]any) {
				code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 10, "sessionId": id})
				return code, out
			}
			leaseOf := func(out map[string]any) time.Time {
				ts, err := time.Parse(time.RFC3339Nano, out["leaseExpiresAt"].(string))
				if err != nil {
					t.Fatalf("leaseExpiresAt in %v: %v", out, err)
				}
				return ts
			}

			t.Run("still USING: renewed", func(t *testing.T) {
				s := testenv.Start(t, mode, "--sweep-interval", "1h") // nothing is swept meanwhile
				r := testenv.Resource(t)
				putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 1})
				code, first := apply(s, r, "replayed-1")
				if code != http.StatusOK {
					t.Fatalf("apply: %d %v", code, first)
				}
				lease := leaseOf(first)
				testenv.Eventually(t, 5*time.Second, "the first lease to be over", func() bool { return time.Now().After(lease.Add(50 * time.Millisecond)) })
				code, again := apply(s, r, "replayed-1")
				if code != http.StatusOK || again["sessionId"] != "replayed-1" || !leaseOf(again).After(time.Now()) {
					t.Fatalf("replay after the lease: %d %v, want 200 with a lease in the future", code, again)
				}
				if code, h, _ := call(t, s, http.MethodPost, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "replayed-1"}); code != http.StatusOK {
					t.Fatalf("heartbeat after the renewed replay: %d %v", code, h)
				}
				if st, _ := getStatus(t, s, r); st.reserved != 10 || st.active != 1 {
					t.Fatalf("status %+v: the replay must not reserve again", st)
				}
			})

			t.Run("swept as LEAKED: 409 with the status", func(t *testing.T) {
				s := testenv.Start(t, mode)
				r := testenv.Resource(t)
				putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 1})
				if code, out := apply(s, r, "replayed-2"); code != http.StatusOK {
					t.Fatalf("apply: %d %v", code, out)
				}
				testenv.Eventually(t, 10*time.Second, "the sweeper to mark the session LEAKED", func() bool {
					st, _ := getStatus(t, s, r)
					return st.active == 0
				})
				code, again := apply(s, r, "replayed-2")
				if code != http.StatusConflict || again["code"] != "SESSION_NOT_ACTIVE" || again["status"] != "LEAKED" {
					t.Fatalf("replay of a swept session: %d %v, want 409 SESSION_NOT_ACTIVE LEAKED", code, again)
				}
			})
		})
	}
}
