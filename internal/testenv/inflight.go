package testenv

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// InFlight holds each call to Enter until N calls are in flight at once;
// a call whose context ends first returns its error. Code that makes the
// calls one after another never gets past its first (it fails at its
// context's deadline), so a test passing through an InFlight shows that
// the calls were concurrent without timing anything. Max is the most calls
// seen in flight at once (a bound on concurrency to check).
type InFlight struct {
	n    int
	open chan struct{}

	mu       sync.Mutex
	cur, max int
	opened   bool
}

// NewInFlight returns an InFlight that opens at n calls in flight.
func NewInFlight(n int) *InFlight { return &InFlight{n: n, open: make(chan struct{})} }

// Enter waits until N calls are in flight at once (then every call passes)
// or ctx ends (it returns ctx.Err()).
func (f *InFlight) Enter(ctx context.Context) error {
	f.mu.Lock()
	f.cur++
	f.max = max(f.max, f.cur)
	if f.cur == f.n && !f.opened {
		f.opened = true
		close(f.open)
	}
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.cur--; f.mu.Unlock() }()
	select {
	case <-f.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Max is the most calls that were in flight at once.
func (f *InFlight) Max() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max
}

// CheckScrape gathers reg (one scrape) and fails t unless it held want
// series named series, the unlabelled counter errs (the collector's failed
// reads, read by a second gather: a gather takes the counter's value while
// the collectors still run) is 0, and f never had more than its n calls in
// flight at once.
func CheckScrape(t testing.TB, reg *prometheus.Registry, f *InFlight, series string, want int, errs string) {
	t.Helper()
	got, failed := 0, -1.0
	for range 2 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case series:
				got = max(got, len(mf.GetMetric()))
			case errs:
				failed = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
	}
	if got != want || failed != 0 {
		t.Errorf("%s: %d series, want %d; %s = %v, want 0 (reads made one after another fail at the timeout)", series, got, want, errs, failed)
	}
	if m := f.Max(); m > f.n {
		t.Errorf("%d reads in flight at once, want at most %d", m, f.n)
	}
}
