// Command llm-tokens is an example business service that spends a TOKENS
// resource at a high rate through a LocalPool (seed 004): each simulated
// completion reserves its max_tokens from the pool's local batch and
// commits the tokens it really produced; the pool talks to quota-center
// only to fetch and settle batches. At the end it prints how many central
// calls the run needed per 1,000 tokens and checks that usedAmount grew by
// exactly the tokens committed.
//
//	make run   # a dev-mode center on :8080, then in another terminal:
//	curl -sS -X PUT localhost:8080/admin/policies/llm_tokens -H 'Content-Type: application/json' \
//	  -d '{"quotaType":"TOKENS","totalLimit":100000000,"resetCron":"0 0 1 * *"}'
//	go run ./examples/llm-tokens --workers 8 --calls 2000
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/api/client"
)

func main() {
	center := flag.String("center", "http://127.0.0.1:8080", "quota-center base URL")
	resource := flag.String("resource", "llm_tokens", "TOKENS resource to spend")
	workers := flag.Int("workers", 8, "concurrent completions")
	calls := flag.Int("calls", 2000, "completions in all")
	maxTokens := flag.Int64("max-tokens", 1024, "tokens each completion reserves")
	flag.Parse()

	reg := prometheus.NewRegistry()
	m, err := client.NewManager(*center, client.WithClientID("llm-tokens-example"), client.WithRegistry(reg),
		client.WithPoolDefaults(client.WithOutage(client.OutageSafeRate, 2000))) // 2,000 tokens/s while the center is away
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer m.Close(context.Background())
	ctx := context.Background()
	before, err := m.Client().Status(ctx, *resource)
	if err != nil {
		fmt.Fprintln(os.Stderr, "status:", err)
		os.Exit(1)
	}
	pool, err := m.LocalPool(*resource, client.WithBatch(4096, 1024, 200_000))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	var committed atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*calls) {
				r, err := pool.Reserve(ctx, *maxTokens)
				if err != nil {
					fmt.Fprintf(os.Stderr, "reserve (pool mode %s): %v\n", pool.Mode(), err)
					return
				}
				produced := 50 + rand.Int64N(*maxTokens+200) // the model may run past max_tokens: overage
				if err := r.Commit(produced); err != nil {
					fmt.Fprintln(os.Stderr, "commit:", err)
					return
				}
				committed.Add(produced)
			}
		}()
	}
	wg.Wait()
	if err := pool.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
	}
	after, err := m.Client().Status(ctx, *resource)
	if err != nil {
		fmt.Fprintln(os.Stderr, "status:", err)
		os.Exit(1)
	}
	central := counterSum(reg, "quota_client_calls_total")
	fmt.Printf("%d tokens committed in %d completions; %.0f central calls (%.2f per 1,000 tokens)\n",
		committed.Load(), *calls, central, central*1000/float64(max(committed.Load(), 1)))
	if got := after.UsedAmount - before.UsedAmount; got != committed.Load() {
		fmt.Printf("usedAmount grew by %d, want %d (another client on the resource?)\n", got, committed.Load())
		os.Exit(1)
	}
	fmt.Println("usedAmount grew by exactly the tokens committed")
}

// counterSum adds up every series of a counter family.
func counterSum(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
