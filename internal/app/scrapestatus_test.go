package app

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The collectors of one scrape share a resource's status read: concurrent
// and later reads within scrapeStatusTTL make one call, a read after it
// calls again, and a failed read is not kept.
func TestScrapeStatusReadsEachResourceOncePerScrape(t *testing.T) {
	var calls atomic.Int64
	fail := atomic.Bool{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newScrapeStatus(func(_ context.Context, r string) (quota.StatusResponse, error) {
		calls.Add(1)
		if fail.Load() {
			return quota.StatusResponse{}, quota.ErrUnavailable
		}
		return quota.StatusResponse{Used: int64(len(r)) + calls.Load()*100}, nil
	})
	s.now = func() time.Time { return now }
	var wg sync.WaitGroup
	got := make([]int64, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.Status(context.Background(), "res")
			if err != nil {
				t.Error(err)
			}
			got[i] = st.Used
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d reads for 8 concurrent collectors; want 1", n)
	}
	for _, u := range got {
		if u != 103 {
			t.Fatalf("answers %v; want the one read's 103 each", got)
		}
	}
	now = now.Add(scrapeStatusTTL - time.Millisecond)
	if st, _ := s.Status(context.Background(), "res"); st.Used != 103 || calls.Load() != 1 {
		t.Fatalf("within the TTL: %d after %d reads; want 103 after 1", st.Used, calls.Load())
	}
	if _, _ = s.Status(context.Background(), "other"); calls.Load() != 2 {
		t.Fatalf("another resource: %d reads; want 2", calls.Load())
	}
	now = now.Add(time.Millisecond) // the next scrape
	fail.Store(true)
	if _, err := s.Status(context.Background(), "res"); !errors.Is(err, quota.ErrUnavailable) || calls.Load() != 3 {
		t.Fatalf("after the TTL: %v after %d reads; want the read's error after 3", err, calls.Load())
	}
	fail.Store(false)
	now = now.Add(scrapeStatusTTL)
	if st, err := s.Status(context.Background(), "res"); err != nil || st.Used != 403 {
		t.Fatalf("after a failed read: %d, %v; want a new read (403)", st.Used, err)
	}
	s.mu.Lock()
	kept := len(s.m)
	s.mu.Unlock()
	if kept != 1 {
		t.Fatalf("%d answers kept; want 1 (other's expired one dropped)", kept)
	}
}
