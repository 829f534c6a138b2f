package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/api/client"
)

// localConfig is the --local-batch mode: the rows are served from a
// LocalPool of the Go SDK (seed 004's local batches) instead of one apply
// and one finish per row.
type localConfig struct {
	Batch    int64 // first batch; 0 = the plain mode
	MaxBatch int64
}

// register adds the mode's flags to fs.
func (l *localConfig) register(fs *flag.FlagSet) {
	fs.Int64Var(&l.Batch, "local-batch", 0, "when > 0, serve the rows from an SDK LocalPool with this first batch (tokens): "+
		"each row reserves ContextTokens + --max-tokens locally and commits what it used; the pool fetches and settles batches")
	fs.Int64Var(&l.MaxBatch, "local-batch-max", 200_000, "largest batch the LocalPool may grow to (--local-batch mode)")
}

// check validates the mode's flags.
func (l *localConfig) check() error {
	if l.Batch < 0 || l.Batch > client.MaxAmount || (l.Batch > 0 && l.MaxBatch < l.Batch) || l.MaxBatch > client.MaxAmount {
		return &usageError{"--local-batch must be in 0 … 2^53-1 and at most --local-batch-max"}
	}
	return nil
}

// replayLocal is replay through a LocalPool: per row Reserve(ContextTokens
// + MaxTokens) and Commit(ContextTokens + GeneratedTokens), all local; the
// Stats count central calls (apply, heartbeat, finish of batches) as
// Requests, the reserve and commit latencies as the apply and finish
// latencies, and a reserve refused with 429 as a refused row. The pool is
// closed before it returns, so every unused unit is back at the center and
// usedAmount has grown by exactly TokensCharged.
func replayLocal(ctx context.Context, cfg config, rows []Row, stdout io.Writer) (*Stats, error) {
	reg := prometheus.NewRegistry()
	m, err := client.NewManager(cfg.URL, client.WithRegistry(reg), client.WithClientID(cfg.ClientID),
		client.WithLogger(slog.New(slog.DiscardHandler)),
		client.WithClientOptions(client.WithAPIKey(cfg.APIKey), client.WithUserAgent("qc-replay/1")))
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	defer m.Close(context.WithoutCancel(ctx))
	pool, err := m.LocalPool(cfg.Resource, client.WithBatch(cfg.Local.Batch, min(cfg.Local.Batch, 1000), cfg.Local.MaxBatch))
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	fmt.Fprintf(stdout, "local batch:      first batch %d, max %d tokens (LocalPool of the Go SDK)\n", cfg.Local.Batch, cfg.Local.MaxBatch)

	total := fanOut(ctx, rows, cfg.Concurrency, cfg.Speedup, func(ctx context.Context, row Row, st *Stats) {
		localRow(ctx, pool, row, cfg.MaxTokens, st)
	})
	closeErr := pool.Close(context.WithoutCancel(ctx))
	calls := centralCalls(reg)
	total.Applies, total.Finishes = int(calls["apply"]), int(calls["finish"])
	total.Requests = int(calls["apply"] + calls["finish"] + calls["heartbeat"] + calls["status"])
	fmt.Fprintf(stdout, "central calls:    %d (apply %d, heartbeat %d, finish %d), %.2f per 1,000 tokens charged\n",
		total.Requests, total.Applies, int(calls["heartbeat"]), total.Finishes,
		float64(total.Requests)*1000/float64(max(total.TokensCharged, 1)))
	if closeErr != nil {
		return total, fmt.Errorf("closing the local pool: %w", closeErr)
	}
	return total, nil
}

// localRow reserves and commits one row.
func localRow(ctx context.Context, pool *client.LocalPool, row Row, maxTokens int64, st *Stats) {
	st.Rows++
	want := row.ContextTokens + maxTokens
	start := time.Now()
	r, err := pool.Reserve(ctx, want)
	st.ApplyLatency = append(st.ApplyLatency, time.Since(start))
	if errors.Is(err, client.ErrQuotaExhausted) {
		st.Refused++
		return
	}
	if err != nil {
		st.addError("reserve", err)
		return
	}
	st.Granted++
	st.TokensGranted += want
	used := row.ContextTokens + row.GeneratedTokens
	start = time.Now()
	err = r.Commit(used)
	st.FinishLatency = append(st.FinishLatency, time.Since(start))
	if err != nil {
		st.addError("commit", err)
		return
	}
	st.Finished++
	st.TokensCharged += used
	st.TokensRefunded += max(0, want-used)
	st.TokensOverage += max(0, used-want)
}

// centralCalls reads quota_client_calls_total by op.
func centralCalls(reg *prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "quota_client_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
