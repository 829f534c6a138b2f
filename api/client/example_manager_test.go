package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// A Codex-style call on a DURATION resource: Do applies for 600 seconds,
// heartbeats while fn runs, and finishes with the measured elapsed seconds
// because fn returns a negative usage.
func ExampleManager_Do() {
	center := newFakeCenter("DURATION", 18000) // a stand-in for quota-center
	defer center.Close()

	m, err := client.NewManager(center.URL, client.WithClientID("report-svc"))
	if err != nil {
		panic(err)
	}
	defer m.Close(context.Background())

	err = m.Do(context.Background(), "codex_api", 600, func(ctx context.Context) (int64, error) {
		// … call the external API with ctx …
		return -1, nil // DURATION: charge the measured elapsed seconds
	})
	fmt.Println("err:", err)
	st, _ := m.Client().Status(context.Background(), "codex_api")
	fmt.Println("charged seconds:", st.UsedAmount, "open sessions:", st.ActiveSessions)
	// Output:
	// err: <nil>
	// charged seconds: 1 open sessions: 0
}

// Acquire and Finish by hand, for work that does not fit in one function.
func ExampleManager_Acquire() {
	center := newFakeCenter("TOKENS", 100_000)
	defer center.Close()
	m, _ := client.NewManager(center.URL)
	defer m.Close(context.Background())

	lease, err := m.Acquire(context.Background(), "llm_tokens", 4096)
	if err != nil {
		panic(err)
	}
	fmt.Println("granted:", lease.Granted(), "fail-open:", lease.FailOpen())
	// … stream the completion; the lease heartbeats in the background …
	fr, _ := lease.Finish(context.Background(), 1500)
	fmt.Println("charged:", fr.ChargedAmount, "refunded:", fr.RefundedAmount)
	// Output:
	// granted: 4096 fail-open: false
	// charged: 1500 refunded: 2596
}

// What a service sees when the center is away, per fallback.
func ExampleWithFallback() {
	down := "http://127.0.0.1:1" // nothing listens there
	m, _ := client.NewManager(down,
		client.WithRetry(1, time.Millisecond, time.Millisecond),
		client.WithFallback("reports", client.FailOpen()),
		client.WithFallback("chat", client.Func(func(ctx context.Context, resource string, amount int64, cause error) error {
			fmt.Println("serving", resource, "from the cache")
			return nil
		})))
	defer m.Close(context.Background()) // says the fail-open usage could not be reported

	_, err := m.Acquire(context.Background(), "billing", 10) // default: fail closed
	fmt.Println("billing:", errors.Is(err, client.ErrUnavailable))

	lease, _ := m.Acquire(context.Background(), "reports", 10)
	fmt.Println("reports fail-open:", lease.FailOpen())
	_, _ = lease.Finish(context.Background(), 4) // remembered, reported when the center is back
	fmt.Println("pending reports:", m.PendingReports() > 0)

	_, err = m.Acquire(context.Background(), "chat", 10)
	fmt.Println("chat:", errors.Is(err, client.ErrFallbackTaken))
	// Output:
	// billing: true
	// reports fail-open: true
	// pending reports: true
	// serving chat from the cache
	// chat: true
}

// NewManager refuses a bad configuration and names the option.
func ExampleNewManager() {
	_, err := client.NewManager("http://127.0.0.1:8080", client.WithTimeouts(0, 5*time.Second))
	fmt.Println(err)
	_, err = client.NewManager("http://127.0.0.1:8080", client.WithFallback("x", client.Fallback{}))
	fmt.Println(err)
	_, err = client.NewManager("http://127.0.0.1:8080", client.WithPoolDefaults(client.WithBatch(-1, 1, 10)))
	fmt.Println(err)
	// Output:
	// client: NewManager: WithTimeouts: connect 0s and read 5s must both be positive
	// client: NewManager: WithFallback: resource "x": unknown fallback FallbackMode(0): use FailClosed(), FailOpen() or Func(fn)
	// client: NewManager: WithPoolDefaults: client: WithBatch: want 1 <= min 1 <= initial -1 <= max 10 <= 2^53-1
}

// An LLM token client: reserve the most a call may use, commit what it
// used; the pool serves both from its local batch and settles the batch
// with the center on Close.
func ExampleLocalPool_Reserve() {
	center := newFakeCenter("TOKENS", 1_000_000)
	defer center.Close()
	m, _ := client.NewManager(center.URL)
	defer m.Close(context.Background())

	pool, err := m.LocalPool("llm_tokens", client.WithBatch(2000, 500, 20000))
	if err != nil {
		panic(err)
	}
	for _, used := range []int64{700, 1200, 30} {
		r, err := pool.Reserve(context.Background(), 1024) // max_tokens of the call
		if err != nil {
			panic(err)
		}
		_ = r.Commit(used) // 1200 > 1024: the excess is kept too (overage)
	}
	_ = pool.Close(context.Background())
	st, _ := m.Client().Status(context.Background(), "llm_tokens")
	fmt.Println("used:", st.UsedAmount, "reserved:", st.ReservedAmount)
	// Output:
	// used: 1930 reserved: 0
}

// Fail-open usage that outlives the process: the first Manager runs while
// the center is away and stops before it is back; the next Manager on the
// same spool directory sends what it used, charged once.
func ExampleWithFailOpenSpool() {
	dir, _ := os.MkdirTemp("", "quota-spool")
	defer os.RemoveAll(dir)
	fast := client.WithRetry(1, time.Millisecond, time.Millisecond)

	away, _ := client.NewManager("http://127.0.0.1:1", fast, // nothing listens there
		client.WithFailOpenSpool(dir), client.WithFallback("reports", client.FailOpen()),
		client.WithLogger(slog.New(slog.DiscardHandler)))
	_ = away.Do(context.Background(), "reports", 100, func(context.Context) (int64, error) { return 40, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	fmt.Println("close while away:", away.Close(ctx) != nil) // the spool keeps the usage

	center := newFakeCenter("TOKENS", 1000) // the center is back
	defer center.Close()
	back, _ := client.NewManager(center.URL, fast, client.WithFailOpenSpool(dir))
	_ = back.Close(context.Background()) // sends what it adopted from the spool
	st, _ := back.Client().Status(context.Background(), "reports")
	fmt.Println("used:", st.UsedAmount)
	// Output:
	// close while away: true
	// used: 40
}
