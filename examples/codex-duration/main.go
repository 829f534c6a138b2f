// Command codex-duration is an example business service: a Codex-style
// client that spends seconds of a DURATION resource (seed 000's five hours
// of usage time per day). Each job is one Manager.Do: the SDK applies for
// the job's timeout, heartbeats while the job runs, and finishes with the
// measured elapsed seconds; a job that fails or panics is still finished.
// While quota-center is away the resource fails closed (the default) and
// the job is answered with a fallback message instead.
//
//	make run   # a dev-mode center on :8080, then in another terminal:
//	curl -sS -X PUT localhost:8080/admin/policies/codex_api -H 'Content-Type: application/json' \
//	  -d '{"quotaType":"DURATION","totalLimit":18000,"resetCron":"0 0 * * *","timezone":"Asia/Shanghai"}'
//	go run ./examples/codex-duration --jobs 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

func main() {
	center := flag.String("center", "http://127.0.0.1:8080", "quota-center base URL")
	resource := flag.String("resource", "codex_api", "DURATION resource to spend")
	jobs := flag.Int("jobs", 3, "jobs to run one after the other")
	timeout := flag.Int64("timeout", 600, "seconds each job applies for (its longest run)")
	flag.Parse()

	m, err := client.NewManager(*center, client.WithClientID("codex-duration-example"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer m.Close(context.Background())

	for i := range *jobs {
		err := m.Do(context.Background(), *resource, *timeout, func(ctx context.Context) (int64, error) {
			return -1, callCodex(ctx, i) // -1: charge the measured elapsed seconds
		})
		switch {
		case err == nil:
			fmt.Printf("job %d: done\n", i)
		case errors.Is(err, client.ErrQuotaExhausted):
			var e *client.Error
			errors.As(err, &e)
			fmt.Printf("job %d: no time left today; retry in %v\n", i, e.RetryAfter)
		case errors.Is(err, client.ErrUnavailable):
			fmt.Printf("job %d: quota-center is away: \"Codex is busy, try again in a minute\"\n", i)
		default:
			fmt.Printf("job %d: failed: %v (its time was still charged)\n", i, err)
		}
	}
	if st, err := m.Client().Status(context.Background(), *resource); err == nil {
		fmt.Printf("%s: %d of %d seconds used, %d left\n", *resource, st.UsedAmount, st.TotalLimit, st.RemainingQuota)
	}
}

// callCodex stands in for the external API call: a second or two of work
// that stops when ctx does (the lease ended, or the caller gave up).
func callCodex(ctx context.Context, job int) error {
	select {
	case <-time.After(time.Second + time.Duration(rand.IntN(1000))*time.Millisecond):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("job %d: %w", job, ctx.Err())
	}
}
