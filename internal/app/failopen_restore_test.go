package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestFailOpenSessionFinishedAfterTheOutageIsCountedOnce: a failMode OPEN
// apply granted while Redis was unreachable has a ledger row but no
// reservation in Redis's balance (which was there before the outage). When
// Redis is back, its finish brings the session back from the ledger; the
// balance must then count its grant once, or the finish takes it out of a
// reservation that was never made (seen in review: reserved −30, remaining
// 90 after a 10 and a 40 on a limit of 100, then 120 granted in all before
// reconciliation). Reconciliation is kept out of the way (one pass an hour)
// so that what is checked is the finish's own restore.
func TestFailOpenSessionFinishedAfterTheOutageIsCountedOnce(t *testing.T) {
	p, err := faults.StartProxy(testenv.MustRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	s := testenv.Start(t, testenv.Real, "--redis-addr", p.Addr(), "--reconcile-interval", "1h",
		"--redis-timeout", "300ms")
	r := testenv.Resource(t)
	const limit = 100
	putPolicy(t, s, r, map[string]any{"quotaType": "COUNT", "totalLimit": limit, "failMode": "OPEN"})

	code, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 10})
	if code != http.StatusOK || a["failOpen"] == true {
		t.Fatalf("first apply: %d %v", code, a)
	}
	p.Suspend()
	code, fo, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 40})
	if code != http.StatusOK || fo["failOpen"] != true {
		t.Fatalf("apply while Redis is down: %d %v, want 200 failOpen", code, fo)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	fin := map[string]any{"resourceName": r, "sessionId": fo["sessionId"], "actualUsedAmount": 40}
	testenv.Eventually(t, 20*time.Second, "the fail-open session's finish answered 200", func() bool {
		code, out, _ := call(t, s, http.MethodPost, "/quota/finish", fin)
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("finish of the fail-open session: %d %v", code, out)
		}
		return code == http.StatusOK
	})
	st, _ := getStatus(t, s, r)
	if st.used != 40 || st.reserved != 10 || st.remaining != limit-50 {
		t.Fatalf("status after the fail-open session's finish = %+v, want used 40, reserved 10 (the first session), remaining %d", st, limit-50)
	}
	granted := int64(50)
	for range 10 {
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 10})
		if code == http.StatusOK {
			granted += num(t, out, "grantedAmount")
		}
	}
	if granted != limit {
		t.Fatalf("granted %d in all on a limit of %d, want exactly the limit", granted, limit)
	}
}
