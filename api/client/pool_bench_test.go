package client_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
)

// BenchmarkLocalPoolTake: Take(1) from 8 goroutines (RunParallel with
// parallelism 8/GOMAXPROCS) on a pool whose batches come from an in-memory
// fake center; reports takes/s (the target: ≥ 1,000,000 with 8
// goroutines) and the central calls per 1,000 tokens.
func BenchmarkLocalPoolTake(b *testing.B) {
	center := newFakeCenter("TOKENS", client.MaxAmount)
	defer center.Close()
	m, err := client.NewManager(center.URL, client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	pool, err := m.LocalPool("bench", client.WithBatch(200, 200, 1_000_000))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := pool.Take(ctx, 1); err != nil { // first batch
		b.Fatal(err)
	}
	center.mu.Lock()
	center.calls = 0
	center.mu.Unlock()
	b.SetParallelism(max(1, 8/runtimeGOMAXPROCS()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := pool.Take(ctx, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "takes/s")
	center.mu.Lock()
	calls := center.calls
	center.mu.Unlock()
	b.ReportMetric(float64(calls)*1000/float64(b.N), "calls/1000tokens")
	_ = pool.Close(ctx)
}
