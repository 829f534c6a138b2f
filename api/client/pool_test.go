package client_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// TestPoolBooksStayBalancedUnderRandomUse: takes, reservations committed
// below, at and above their amount (overage), from 4 goroutines on small
// batches (many refills and retirements); after every operation the pool's
// books balance, and after Close the center charged exactly what was handed
// out.
func TestPoolBooksStayBalancedUnderRandomUse(t *testing.T) {
	center := newFakeCenter("TOKENS", client.MaxAmount)
	defer center.Close()
	m, _ := client.NewManager(center.URL, quiet())
	defer m.Close(context.Background())
	p, err := m.LocalPool("r", client.WithBatch(20, 5, 50))
	if err != nil {
		t.Fatal(err)
	}
	var handed atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var open []*client.Reservation
			for range 600 {
				n := 1 + rng.Int64N(8)
				switch rng.IntN(3) {
				case 0:
					if err := p.Take(context.Background(), n); err != nil {
						t.Error(err)
						return
					}
					handed.Add(n)
				case 1:
					r, err := p.Reserve(context.Background(), n)
					if err != nil {
						t.Error(err)
						return
					}
					open = append(open, r)
				default:
					if len(open) == 0 {
						continue
					}
					r := open[0]
					open = open[1:]
					actual := rng.Int64N(2*r.Amount() + 3)
					if err := r.Commit(actual); err != nil {
						t.Error(err)
						return
					}
					handed.Add(actual)
				}
				if err := client.PoolInvariant(p); err != nil {
					t.Error(err)
					return
				}
			}
			for _, r := range open {
				if err := r.Commit(r.Amount() + 1); err != nil {
					t.Error(err)
				}
				handed.Add(r.Amount() + 1)
			}
		}()
	}
	wg.Wait()
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	center.mu.Lock()
	defer center.mu.Unlock()
	if center.used != handed.Load() || len(center.sessions) != 0 {
		t.Fatalf("center charged %d with %d sessions open, handed out %d", center.used, len(center.sessions), handed.Load())
	}
}

// TestOutageSecondsNeverGoBackwards: the janitor's tick time comes from its
// ticker and can be earlier than the moment a refill opened the outage; such
// a tick counts nothing (it panicked: "counter cannot decrease in value"),
// and a later tick counts the whole time since the outage began.
func TestOutageSecondsNeverGoBackwards(t *testing.T) {
	center := newFakeCenter("TOKENS", client.MaxAmount)
	defer center.Close()
	m, _ := client.NewManager(center.URL, quiet())
	defer m.Close(context.Background())
	p, err := m.LocalPool("r", client.WithBatch(20, 5, 50))
	if err != nil {
		t.Fatal(err)
	}
	mark := time.Now()
	if got := client.OutageTick(p, mark, mark.Add(-10*time.Millisecond)); got != 0 {
		t.Fatalf("a tick before the outage began counted %v s, want 0", got)
	}
	if got := client.OutageTick(p, mark, mark.Add(1500*time.Millisecond)); got != 1.5 {
		t.Fatalf("a tick 1.5 s into the outage counted %v s, want 1.5", got)
	}
}
