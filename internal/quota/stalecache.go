package quota

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// staleCache is the read-through cache of the policy cache (policycache.go):
// one answer per resource, reused for ttl, then served stale while one read
// in the background refreshes it (stale-while-revalidate), so a request
// never waits on the store for a resource it has an answer for (issue 22
// §5: with MariaDB frozen, heartbeats waited 2-4 s for policy and pool
// reads).
//
// A resource without an answer (never read, or invalidated by a change)
// waits for its read, at most wait and at most until its context ends; an
// invalidated answer is served again when that read fails with a backend
// failure (ErrUnavailable, ErrCircuitOpen) or does not answer within wait:
// stale beats unknown while the store is down. Each read runs on its own
// deadline of wait, detached from the caller that started it. Concurrent
// reads of one resource share one read (singleflight): a cold cache under
// load sends one query to the store, not one per request. A read that the
// store answers ErrResourceNotFound forgets the resource.
type staleCache[V any] struct {
	ttl  time.Duration
	wait time.Duration
	now  func() time.Time

	mu    sync.Mutex
	m     map[string]staleEntry[V]
	seq   uint64             // the last generation given out
	loads singleflight.Group // per resource and generation
	// reading counts the reads in flight per key: a key without an answer
	// needs a tombstone only while one is (issue 23 §1: 100,000 PUTs left
	// 100,000 tombstones, ~350 bytes each, of policies never read here).
	reading map[string]int
}

type staleEntry[V any] struct {
	v       V
	has     bool // v was read; false: a tombstone left by invalidate
	expires time.Time
	gen     uint64 // changes on every store and invalidate
	invalid bool   // invalidated: read again before use, unless the store is down
}

func newStaleCache[V any](ttl, wait time.Duration, now func() time.Time) *staleCache[V] {
	return &staleCache[V]{ttl: ttl, wait: wait, now: now, m: make(map[string]staleEntry[V]), reading: make(map[string]int)}
}

// get returns key's answer: the cached one while it is fresh; the cached
// one at once, a read started in the background, once it expired; else the
// answer of read (see staleCache). Errors: read's (ErrResourceNotFound, a
// backend failure) when nothing can be served, ErrUnavailable when the
// read did not answer within wait, or the caller's context error wrapped
// in ErrUnavailable when it ended first.
func (c *staleCache[V]) get(ctx context.Context, key string, read func(context.Context) (V, error)) (V, error) {
	now := c.now()
	c.mu.Lock()
	e := c.m[key]
	c.mu.Unlock()
	if e.has && !e.invalid {
		if !now.Before(e.expires) {
			c.load(ctx, key, e.gen, now, read) // refresh; this request does not wait
		}
		return e.v, nil
	}
	ch := c.load(ctx, key, e.gen, now, read)
	timer := time.NewTimer(c.wait)
	defer timer.Stop()
	var err error
	select {
	case r := <-ch:
		if r.Err == nil {
			return r.Val.(V), nil
		}
		var lp loadPanic
		if errors.As(r.Err, &lp) {
			panic(lp.value) // in each waiter, as a read made by the caller itself would
		}
		err = r.Err
	case <-timer.C:
		err = fmt.Errorf("%w: the store did not answer within %s", ErrUnavailable, c.wait)
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	if e.has && isBackendFailure(err) {
		return e.v, nil
	}
	var zero V
	return zero, err
}

// load starts (or joins) the read of key's generation gen, asked at now,
// and stores its answer unless key changed meanwhile; the answer expires
// ttl after now (the clock is read by callers only). The channel gets the
// answer.
func (c *staleCache[V]) load(ctx context.Context, key string, gen uint64, now time.Time, read func(context.Context) (V, error)) <-chan singleflight.Result {
	base := context.WithoutCancel(ctx) // shared by every waiter: not bound to the first caller's end
	return c.loads.DoChan(key+"\x00"+strconv.FormatUint(gen, 10), func() (_ any, err error) {
		// DoChan re-panics out of reach of any recover: the panic goes to
		// the waiters as an error instead (a refresh nobody waits for
		// drops it, and the next get reads again).
		defer func() {
			if r := recover(); r != nil {
				err = loadPanic{r}
			}
		}()
		c.mu.Lock()
		c.reading[key]++
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(base, c.wait)
		defer cancel()
		v, err := read(rctx)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.reading[key]--; c.reading[key] <= 0 {
			delete(c.reading, key)
		}
		if e, ok := c.m[key]; ok && e.gen != gen {
			if !e.has && c.reading[key] == 0 {
				delete(c.m, key) // a tombstone no read needs any more
			}
			return v, err // invalidated (or stored) meanwhile: this answer may be older
		}
		if _, ok := c.m[key]; !ok && gen != 0 {
			return v, err // its tombstone is gone: invalidated meanwhile
		}
		switch {
		case err == nil:
			c.seq++
			c.m[key] = staleEntry[V]{v: v, has: true, expires: now.Add(c.ttl), gen: c.seq}
		case errors.Is(err, ErrResourceNotFound):
			delete(c.m, key)
		case c.m[key].has && isBackendFailure(err):
			// The store is down: serve the invalidated answer as an
			// expired one (no more waits; each get tries a read again).
			e := c.m[key]
			e.invalid, e.expires = false, now
			c.m[key] = e
		}
		return v, err
	})
}

// invalidate makes key's next get read the store again (after a change),
// keeping its answer for when the store is down. A read in flight does not
// store its (older) answer. A key with no answer and no read in flight
// keeps nothing: its next get reads the store after the change anyway.
func (c *staleCache[V]) invalidate(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !e.has && c.reading[key] == 0 {
		if ok {
			delete(c.m, key)
		}
		return
	}
	c.seq++
	e.gen, e.invalid = c.seq, true
	c.m[key] = e
}

// fresh returns key's cached answer if it has one that is neither
// invalidated nor expired: the answer get would give without starting a
// read. Callers try it before get, whose read function is a closure made
// (on the heap) per call.
func (c *staleCache[V]) fresh(key string) (V, bool) {
	now := c.now()
	c.mu.Lock()
	e := c.m[key]
	c.mu.Unlock()
	return e.v, e.has && !e.invalid && now.Before(e.expires)
}

// peek returns key's cached answer if it has one that is not invalidated,
// fresh or not.
func (c *staleCache[V]) peek(key string) (V, bool) {
	c.mu.Lock()
	e := c.m[key]
	c.mu.Unlock()
	return e.v, e.has && !e.invalid
}

// loadPanic carries a read's panic to the callers waiting for it.
type loadPanic struct{ value any }

func (p loadPanic) Error() string { return fmt.Sprint("policy cache read panicked: ", p.value) }
