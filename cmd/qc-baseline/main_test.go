package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testenv"
)

func post(t *testing.T, url string, body map[string]any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// start runs the baseline on redisAddr for resource res with the extra
// flags, until the test ends, and returns its base URL. At the end it stops
// it and removes res's Redis keys.
func start(t *testing.T, redisAddr, res string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	args := append([]string{"--addr", "127.0.0.1:0", "--redis-addr", redisAddr, "--resource", res}, extra...)
	go func() { done <- run(ctx, args, func(a string) { addr <- a }) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("baseline did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stop: %v", err)
		}
		// Remove the test resource's keys (a handful).
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, "qc:{"+res+"}:*").Result()
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
	})
	return base
}

// TestSessionOnRealRedis runs apply → heartbeat → finish through the
// baseline against the machine's Redis (skipped when it is not there).
func TestSessionOnRealRedis(t *testing.T) {
	redisAddr := testenv.MustRedis(t)
	res := "baseline-test-" + testenv.RandomSuffix()
	base := start(t, redisAddr, res, "--limit", "100")

	code, a := post(t, base+"/quota/apply", map[string]any{"resourceName": res, "applyAmount": 60, "sessionId": "s-1"})
	if code != http.StatusOK || a["sessionId"] != "s-1" || a["grantedAmount"] != float64(60) || a["remainingQuota"] != float64(40) {
		t.Fatalf("apply: %d %v", code, a)
	}
	if code, out := post(t, base+"/quota/apply", map[string]any{"resourceName": res, "applyAmount": 60}); code != http.StatusTooManyRequests {
		t.Fatalf("apply over the limit: %d %v", code, out)
	}
	if code, h := post(t, base+"/quota/heartbeat", map[string]any{"resourceName": res, "sessionId": "s-1"}); code != http.StatusOK || h["status"] != "USING" {
		t.Fatalf("heartbeat: %d %v", code, h)
	}
	code, f := post(t, base+"/quota/finish", map[string]any{"resourceName": res, "sessionId": "s-1", "actualUsedAmount": 10})
	if code != http.StatusOK || f["refundedAmount"] != float64(50) || f["remainingQuota"] != float64(90) {
		t.Fatalf("finish: %d %v", code, f)
	}
	if code, _ := post(t, base+"/quota/heartbeat", map[string]any{"resourceName": res, "sessionId": "nope"}); code != http.StatusNotFound {
		t.Fatalf("heartbeat of a missing session: %d", code)
	}
}

// TestRefusesAnUnreachableRedis: with no Redis at --redis-addr, the
// baseline and its ledger mode (quota-center's Redis path, internal/app's
// OpenRedis) stop at start, before they listen, with an error naming the
// address and the cause.
func TestRefusesAnUnreachableRedis(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra func(t *testing.T) []string
	}{
		{"baseline", func(*testing.T) []string { return nil }},
		{"ledger mode", func(t *testing.T) []string { return []string{"--mysql-dsn", testenv.MustMySQL(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--addr", "127.0.0.1:0", "--redis-addr", "127.0.0.1:1"}, tc.extra(t)...)
			err := run(context.Background(), args, func(string) { t.Error("it listened") })
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range []string{"connect redis 127.0.0.1:1", "connection refused"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
