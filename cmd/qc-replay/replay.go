package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/quotacenter/quota-center/api/client"
)

// maxRetries is how many times a call is retried (after the first attempt)
// on 503 BACKEND_UNAVAILABLE or a transport error.
const maxRetries = 3

// replayOptions are the parts of the configuration the replay itself uses.
type replayOptions struct {
	Resource    string
	ClientID    string
	MaxTokens   int64
	Concurrency int
	Speedup     float64 // 0: as fast as possible
	// Backoff is the delay before the first retry; it doubles each retry.
	Backoff time.Duration
}

// replay sends every row through c: apply ContextTokens+MaxTokens, then,
// when granted, finish with ContextTokens+GeneratedTokens. Cancelling ctx
// stops dispatching new rows; rows already started are completed (their
// calls use a context that is not cancelled, bounded by the client's
// timeout) so that no reservation is left behind.
func replay(ctx context.Context, c *client.Client, rows []Row, o replayOptions) *Stats {
	return fanOut(ctx, rows, o.Concurrency, o.Speedup, func(ctx context.Context, row Row, st *Stats) {
		replayRow(ctx, c, row, o, st)
	})
}

// fanOut runs each row through do on concurrency workers, each counting
// into its own Stats, dispatched at the pace dispatch keeps, and merges the
// Stats. do gets a context that is not cancelled with ctx.
func fanOut(ctx context.Context, rows []Row, concurrency int, speedup float64, do func(context.Context, Row, *Stats)) *Stats {
	jobs := make(chan Row) // unbuffered: a send happens when a worker is free
	workers := make([]*Stats, max(concurrency, 1))
	callCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i := range workers {
		st := newStats()
		workers[i] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			for row := range jobs {
				do(callCtx, row, st)
			}
		}()
	}

	lag := dispatch(ctx, rows, speedup, jobs)
	close(jobs)
	wg.Wait()

	total := newStats()
	for _, st := range workers {
		total.Merge(st)
	}
	total.MaxLag = lag
	return total
}

// dispatch sends rows to jobs, at the trace's pace divided by speedup when
// speedup > 0 (gaps are measured from the first row; a row earlier than the
// previous one goes at once). It returns the worst lag of a row behind its
// scheduled time.
func dispatch(ctx context.Context, rows []Row, speedup float64, jobs chan<- Row) time.Duration {
	if len(rows) == 0 {
		return 0
	}
	start := time.Now()
	t0 := rows[0].Time
	var maxLag time.Duration
	timer := time.NewTimer(time.Hour)
	timer.Stop() // Go ≥ 1.23: a stopped timer has no stale tick; Reset is safe
	defer timer.Stop()
	for _, row := range rows {
		var due time.Time
		if speedup > 0 {
			due = start.Add(time.Duration(float64(row.Time.Sub(t0)) / speedup))
			if wait := time.Until(due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return maxLag
				}
			}
		}
		select {
		case jobs <- row:
		case <-ctx.Done():
			return maxLag
		}
		if speedup > 0 {
			maxLag = max(maxLag, time.Since(due))
		}
	}
	return maxLag
}

// replayRow applies and finishes one row, counting into st.
func replayRow(ctx context.Context, c *client.Client, row Row, o replayOptions, st *Stats) {
	st.Rows++
	sessionID := uuid.NewString() // fresh per row: the idempotency key of its retries
	var applied *client.ApplyResponse
	err := withRetries(ctx, o.Backoff, st, &st.Applies, &st.ApplyLatency, func() error {
		var err error
		applied, err = c.Apply(ctx, client.ApplyRequest{
			ResourceName: o.Resource,
			ApplyAmount:  row.ContextTokens + o.MaxTokens,
			ClientID:     o.ClientID,
			SessionID:    sessionID,
		})
		return err
	})
	if errors.Is(err, client.ErrQuotaExhausted) {
		st.Refused++
		return
	}
	if err != nil {
		st.addError("apply", err)
		return
	}
	st.Granted++
	st.TokensGranted += applied.GrantedAmount

	var finished *client.FinishResponse
	err = withRetries(ctx, o.Backoff, st, &st.Finishes, &st.FinishLatency, func() error {
		var err error
		finished, err = c.Finish(ctx, client.FinishRequest{
			ResourceName:     o.Resource,
			SessionID:        applied.SessionID,
			ActualUsedAmount: row.ContextTokens + row.GeneratedTokens,
		})
		return err
	})
	if err != nil {
		st.addError("finish", err)
		return
	}
	st.Finished++
	st.TokensCharged += finished.ChargedAmount
	st.TokensRefunded += finished.RefundedAmount
	st.TokensOverage += finished.OverageAmount
}

// withRetries runs call, retrying up to maxRetries times when retryable
// says so, with exponential backoff (or the server's Retry-After when
// longer). It counts every attempt in *calls and st.Requests and records
// its latency in *lat.
func withRetries(ctx context.Context, backoff time.Duration, st *Stats, calls *int, lat *[]time.Duration, call func() error) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			st.Retries++
		}
		st.Requests++
		*calls++
		start := time.Now()
		err := call()
		*lat = append(*lat, time.Since(start))
		if err == nil || attempt >= maxRetries || !retryable(err) {
			return err
		}
		wait := backoff << attempt
		if e, ok := asClientError(err); ok && e.RetryAfter > wait && e.RetryAfter <= 5*time.Second {
			wait = e.RetryAfter
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// retryable reports whether a call may be retried with the same session id:
// on 503 BACKEND_UNAVAILABLE, a code-less 502/503/504 from a proxy, or a
// transport error (including the client's per-call timeout).
func retryable(err error) bool {
	if e, ok := asClientError(err); ok {
		if e.Code == "" {
			return e.StatusCode == 502 || e.StatusCode == 503 || e.StatusCode == 504
		}
		return e.Code == client.CodeBackendUnavailable
	}
	return !errors.Is(err, context.Canceled)
}

// asClientError unwraps a *client.Error.
func asClientError(err error) (*client.Error, bool) {
	var e *client.Error
	ok := errors.As(err, &e)
	return e, ok
}
