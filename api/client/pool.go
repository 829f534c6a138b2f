package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrPoolClosed is returned by a closed LocalPool.
var ErrPoolClosed = errors.New("quota-center client: local pool closed")

// LocalPool serves high-rate use of one resource from local batches (seed
// 004): it holds a batch lease from the center (a session for a batch of
// units, heartbeated like any lease) and hands units out in process with
// Take, TryTake and Reserve; it applies for the next batch before the
// current one runs dry (when 10% is left, one apply in flight), sizes
// batches to its observed rate × the target period, and returns unused
// units (finishing the batch session with the units handed out) on Close,
// after an idle time, and when a batch goes stale (the policy version
// changed). See docs/sdk.md for the bounds it keeps. Safe for concurrent
// use.
type LocalPool struct {
	m        *Manager
	resource string
	cfg      poolConfig

	mu          sync.Mutex
	batches     []*poolBatch
	avail       int64 // free units of the live batches
	held        int64 // units of open reservations
	lastBatch   int64 // size of the last batch granted
	refilling   bool
	changed     chan struct{} // closed and replaced on every refill result
	lastErr     error         // last refill failure, while it stands
	retryAt     time.Time     // no refill before this (429 backoff, outage)
	failures    int
	outageSince time.Time
	safeTokens  float64
	safeAt      time.Time
	safeUsed    int64  // units handed at the safe rate, to report
	safeID      string // the session id they are reported under
	safeSpooled int64  // safeUsed last written to the spool
	closed      bool

	taken      atomic.Int64 // units handed, for the rate and the idle check
	rate       float64      // units per second, moving average (janitor only)
	rateLast   int64
	grantAt    time.Time // when the last batch was granted
	grantTaken int64     // taken then
	idleFor    time.Duration

	wg   sync.WaitGroup
	stop chan struct{}

	mLocal, mWaited, mSafe, mDenied prometheus.Counter
	mUnits                          prometheus.Counter
}

// poolBatch is one batch lease.
type poolBatch struct {
	lease   *Lease
	granted int64
	used    int64 // handed out and kept (committed), overage included
	held    int64 // in open reservations
	stale   bool
	retired bool
}

func (b *poolBatch) free() int64 {
	if b.stale || b.retired {
		return 0
	}
	return max(0, b.granted-b.used-b.held)
}

// LocalPool returns a pool for resource, configured by the Manager's
// WithPoolDefaults and then opts. It applies for nothing until the first
// take. Errors: an invalid option (named), ErrManagerClosed.
func (m *Manager) LocalPool(resource string, opts ...PoolOption) (*LocalPool, error) {
	cfg := m.cfg.pool
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	p := &LocalPool{m: m, resource: resource, cfg: cfg, changed: make(chan struct{}), stop: make(chan struct{}),
		mLocal: m.met.takes.WithLabelValues(resource, "local"), mWaited: m.met.takes.WithLabelValues(resource, "waited"),
		mSafe: m.met.takes.WithLabelValues(resource, "safe_rate"), mDenied: m.met.takes.WithLabelValues(resource, "denied"),
		mUnits: m.met.takeUnits.WithLabelValues(resource)}
	p.rate = float64(cfg.batch) / cfg.targetPeriod.Seconds()
	m.met.batch.WithLabelValues(resource).Set(float64(cfg.batch))
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrManagerClosed
	}
	m.pools[p] = struct{}{}
	m.mu.Unlock()
	p.wg.Add(1)
	go p.janitor()
	return p, nil
}

// Resource returns the pool's resource.
func (p *LocalPool) Resource() string { return p.resource }

// Mode says what the pool is doing now: "normal" (serving from batches),
// "exhausted" (the center answered 429; backing off), or, while the center
// is away, the declared outage behaviour "deny" or "safe_rate".
func (p *LocalPool) Mode() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.modeLocked()
}

func (p *LocalPool) modeLocked() string {
	switch {
	case !p.outageSince.IsZero():
		return p.cfg.outage.String()
	case p.lastErr != nil && errors.Is(p.lastErr, ErrQuotaExhausted):
		return "exhausted"
	}
	return "normal"
}

// Available returns the units the pool can hand out now without a call.
func (p *LocalPool) Available() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.avail
}

// Take hands out n units (n ≥ 1), from the local batch when it has them,
// else after the refill it starts or joins, waiting at most until ctx ends.
// Errors: the refill's *Error (ErrQuotaExhausted while the resource is
// spent; Takes fail at once during the 429 backoff), an *UnavailableError
// while the center is away and the outage mode is OutageDeny,
// ErrPoolClosed, ctx.Err().
func (p *LocalPool) Take(ctx context.Context, n int64) error {
	_, err := p.take(ctx, n, true, false)
	return err
}

// TryTake hands out n units if the pool can do so without waiting (from
// the batch, or at the outage safe rate); it starts a refill when the batch
// runs low and never blocks.
func (p *LocalPool) TryTake(n int64) bool {
	_, err := p.take(context.Background(), n, false, false)
	return err == nil
}

var errWouldWait = errors.New("quota-center client: take would wait")

// take is Take, TryTake (wait false) and Reserve (hold true). It returns
// the batches the units came from (Reserve only).
func (p *LocalPool) take(ctx context.Context, n int64, wait, hold bool) ([]part, error) {
	if n < 1 {
		return nil, fmt.Errorf("quota-center client: take of %d units: want at least 1", n)
	}
	waited := false
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		if p.avail >= n {
			parts := p.consumeLocked(n, hold)
			p.maybeRefillLocked(0)
			p.mu.Unlock()
			if !hold {
				p.taken.Add(n)
				p.mUnits.Add(float64(n))
			}
			if waited {
				p.mWaited.Inc()
			} else {
				p.mLocal.Inc()
			}
			return parts, nil
		}
		if !p.outageSince.IsZero() && p.cfg.outage == OutageSafeRate && p.safeTakeLocked(n, hold) {
			p.maybeRefillLocked(n)
			p.mu.Unlock()
			p.mSafe.Inc()
			if !hold {
				p.taken.Add(n)
				p.mUnits.Add(float64(n))
			}
			return []part{{n: n}}, nil
		}
		if wait && !p.outageSince.IsZero() && p.cfg.outage == OutageSafeRate {
			// Wait for the safe-rate bucket to hold n (or for a refill).
			d := time.Duration((float64(n) - p.safeTokens) / p.cfg.safeRate * float64(time.Second))
			ch := p.changed
			p.maybeRefillLocked(n)
			p.mu.Unlock()
			t := time.NewTimer(max(d, time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				p.mDenied.Inc()
				return nil, ctx.Err()
			case <-ch:
				t.Stop()
			case <-t.C:
			}
			p.mu.Lock()
			continue
		}
		if p.lastErr != nil && time.Now().Before(p.retryAt) {
			err := p.lastErr
			p.mu.Unlock()
			p.mDenied.Inc()
			return nil, err
		}
		p.maybeRefillLocked(n)
		if !wait {
			p.mu.Unlock()
			p.mDenied.Inc()
			return nil, errWouldWait
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			p.mDenied.Inc()
			return nil, ctx.Err()
		case <-ch:
		}
		waited = true
		p.mu.Lock()
		if p.lastErr != nil && !p.refilling && p.avail < n && (p.outageSince.IsZero() || p.cfg.outage == OutageDeny) {
			err := p.lastErr // the refill this take waited for failed
			p.mu.Unlock()
			p.mDenied.Inc()
			return nil, err
		}
	}
}

// part is what a reservation holds of one batch (b nil: the safe rate).
type part struct {
	b *poolBatch
	n int64
}

// consumeLocked takes n ≤ avail units from the oldest batches first.
func (p *LocalPool) consumeLocked(n int64, hold bool) []part {
	p.avail -= n
	var parts []part
	for _, b := range p.batches {
		if n == 0 {
			break
		}
		k := min(b.free(), n)
		if k == 0 {
			continue
		}
		n -= k
		if hold {
			b.held += k
			p.held += k
			parts = append(parts, part{b, k})
		} else {
			b.used += k
		}
	}
	p.retireDrainedLocked()
	return parts
}

// retireDrainedLocked finishes the batches that have nothing left to hand
// out and no open reservation, keeping the newest (its size guides the next
// refill).
func (p *LocalPool) retireDrainedLocked() {
	for i := 0; i < len(p.batches)-1; {
		b := p.batches[i]
		if b.free() == 0 && b.held == 0 {
			p.retireLocked(b) // removes p.batches[i]
			continue
		}
		i++
	}
}

// safeTakeLocked serves n from the outage safe-rate bucket (burst: one
// second of the rate, at least n's worth when n is larger).
func (p *LocalPool) safeTakeLocked(n int64, hold bool) bool {
	now := time.Now()
	burst := max(p.cfg.safeRate, 1)
	p.safeTokens = min(burst, p.safeTokens+now.Sub(p.safeAt).Seconds()*p.cfg.safeRate)
	p.safeAt = now
	if p.safeTokens < float64(n) {
		return false
	}
	p.safeTokens -= float64(n)
	if !hold {
		p.safeUsed += n
	}
	return true
}

// Reservation is units set aside by Reserve until Commit says how many were
// used.
type Reservation struct {
	p     *LocalPool
	parts []part
	n     int64
	done  atomic.Bool
}

// Reserve sets n units aside (as Take would hand them out) for work whose
// real size is known only afterwards, such as an LLM call's output tokens.
// Commit settles it. Errors as Take.
func (p *LocalPool) Reserve(ctx context.Context, n int64) (*Reservation, error) {
	parts, err := p.take(ctx, n, true, true)
	if err != nil {
		return nil, err
	}
	return &Reservation{p: p, parts: parts, n: n}, nil
}

// Amount returns the units reserved.
func (r *Reservation) Amount() int64 { return r.n }

// Commit keeps actual units (≥ 0) and gives the rest back to the local
// batch. More than reserved is kept too: the excess is taken from the free
// units of the reservation's batch and beyond them charged as overage when
// the batch session finishes (as /quota/finish charges it). A second Commit returns
// an error; after Close the reservation was charged in full and Commit
// returns ErrPoolClosed.
func (r *Reservation) Commit(actual int64) error {
	if actual < 0 {
		return fmt.Errorf("quota-center client: Commit(%d): negative usage", actual)
	}
	if !r.done.CompareAndSwap(false, true) {
		return errors.New("quota-center client: reservation already committed")
	}
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	left := actual
	var last *poolBatch
	closed := false
	for _, pt := range r.parts {
		k := min(left, pt.n)
		left -= k
		if pt.b == nil { // safe rate: what was not used goes back to the bucket
			p.safeUsed += k
			p.safeTokens += float64(pt.n - k)
			continue
		}
		b := pt.b
		last = b
		if b.retired {
			closed = true
			continue
		}
		f := b.free()
		b.held -= pt.n
		p.held -= pt.n
		b.used += k
		p.avail += b.free() - f // what comes back, unless the batch is stale or over its grant
	}
	if left > 0 && !closed { // overage: on the last batch's bill (its free units first), or the safe rate's
		if last != nil {
			f := last.free()
			last.used += left
			p.avail -= f - last.free()
		} else {
			p.safeUsed += left
		}
	}
	for _, pt := range r.parts {
		if pt.b != nil && !pt.b.retired && pt.b.stale && pt.b.held == 0 {
			p.retireLocked(pt.b)
		}
	}
	p.retireDrainedLocked()
	if closed {
		return ErrPoolClosed
	}
	p.taken.Add(actual)
	p.mUnits.Add(float64(actual))
	return nil
}

// Close returns the unused units: every batch session is finished with the
// units handed out from it (open reservations count in full), the units
// handed at the outage safe rate are reported, and the pool stops. It waits
// for a refill in flight and returns its batch too. Takes after Close fail
// with ErrPoolClosed.
func (p *LocalPool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	p.broadcastLocked()
	p.mu.Unlock()
	p.wg.Wait() // janitor and refill
	p.mu.Lock()
	var finish []*poolBatch
	for _, b := range p.batches {
		b.used += b.held
		b.held = 0
		finish = append(finish, p.detachLocked(b))
	}
	p.reportSafeLocked()
	p.mu.Unlock()
	var errs []error
	for _, b := range finish {
		if _, err := b.lease.Finish(ctx, b.used); err != nil {
			errs = append(errs, err)
		}
	}
	p.wg.Wait() // batches retired meanwhile
	p.m.mu.Lock()
	delete(p.m.pools, p)
	p.m.mu.Unlock()
	return errors.Join(errs...)
}
