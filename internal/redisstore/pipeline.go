package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/group"
)

// Pipelining configures auto-pipelining of the hot-path scripts (apply,
// heartbeat, finish): the script calls of concurrent requests are sent to
// Redis as one pipeline (one write and one read on one connection) instead
// of one round trip each. Each script still runs atomically on its own; a
// pipeline is not a transaction, and a reply answers only its own call.
//
// Why: on loopback, every round trip costs a write and a read system call
// on both sides and a wake-up of the other process, which costs more CPU
// than the script itself; a pipeline of n calls pays them once.
type Pipelining struct {
	// MaxCalls is the most script calls in one pipeline; 0 turns
	// auto-pipelining off (one EVALSHA round trip per call).
	MaxCalls int
	// InFlight is the most pipelines sent at once (default 1). While all
	// are in flight, new calls gather into the next pipeline.
	InFlight int
	// Interval is the least time between two pipelines' sends
	// (group.NewSpaced): a pipeline goes when a slot is free and Interval
	// has passed since the one before it was sent, or when it holds
	// MaxCalls. A call that comes after a quiet Interval goes at once, so
	// a lone request waits for nothing; under load a call waits at most
	// Interval more, and pipelines grow with the rate (Nagle's algorithm).
	// 0 = none: a pipeline holds what arrived while the one before it was
	// out.
	Interval time.Duration
	// Timeout is the client's per-command timeout (default 500ms;
	// quota-center passes --redis-timeout). A call waits at most Timeout + 1s
	// for its pipeline to be sent (what a direct call may wait for a pooled
	// connection) and a pipeline gets Timeout to be answered, without
	// retries after that, so a call returns within 2 × Timeout + 1s. A call
	// not sent by then never runs; one sent and not answered returns
	// context.DeadlineExceeded (unavailable) like a direct call whose reply
	// timed out: its script may have run (every hot-path script is
	// idempotent by session id, and reconciliation releases a reservation
	// whose apply never reached the ledger).
	Timeout time.Duration
	// OnPipeline, when set, is told the calls of each pipeline as it is
	// sent. It runs on the pipeline's goroutine and must not block.
	OnPipeline func(calls int)
	// BatchApplies sends the fast-path applies of one resource's period in
	// a pipeline as one apply_batch.lua call (batchapply.go): on one hot
	// resource, 44 % fewer Redis instructions and ~16 % less Redis CPU per
	// apply at ~7 a batch (docs/performance.md, "Batched applies"). Off,
	// each is its own apply.lua call.
	BatchApplies bool
	// OnBatch, when set, is told of each apply_batch.lua call that was
	// answered: how many applies it carried and how many of them it left
	// to apply.lua (undecided). It runs on the pipeline's goroutine and
	// must not block.
	OnBatch func(applies, undecided int)
}

// DefaultPipelining is what quota-center serve uses unless configured
// (a Redis Cluster client keeps 4: internal/app hotStore).
// InFlight 1 (issue 23 §3; was 4, then 2): Redis pays a read, a write and
// an event-loop pass per pipeline, not per call. On a quiet machine, apply
// at 50 connections: calls per pipeline 3.6-3.8 with 2 in flight, 7.1-7.3
// with 1, Redis CPU per apply 28-30 -> 26 µs (docs/performance.md, "One
// pipeline in flight"). A call that arrives while the pipeline is out waits
// for its reply (one round trip, ~0.1-0.3 ms under load) and goes in the
// next; a pipeline grows with the load up to MaxCalls, so one in flight
// does not cap the rate below what one Redis serves.
//
// Interval 500µs (issue 23 §3, chosen on the apply wrk scenario at 50
// connections on this 2-core machine, 4 December 2026): calls per
// pipeline ~6 -> ~10, Redis CPU per apply 21-22 -> 18-19 µs against none
// in interleaved runs; 1ms saved ~1.5 µs more at twice the added wait
// (docs/performance.md, "Spaced pipelines").
var DefaultPipelining = Pipelining{MaxCalls: 128, InFlight: 1, Interval: 500 * time.Microsecond, Timeout: 500 * time.Millisecond, BatchApplies: true}

// scriptCall is one script call waiting for its pipeline's reply.
type scriptCall struct {
	ctx context.Context
	// expires is when the caller stops waiting (run's bound; the run of a
	// call without a pipeline leaves it zero): a call not sent by then is
	// not sent.
	expires time.Time
	script  *redis.Script
	keys    []string
	args    []any
	val     any
	err     error
	done    chan struct{}
	// weight is how many callers' calls this one is: 0 or 1 for a
	// caller's own, the applies of an apply_batch.lua call (batchapply.go).
	weight int
	// batch is the apply_batch.lua call that carries this apply, nil when
	// it goes on its own (batchApplies).
	batch *applyBatch
}

// gaveUp is the error of a call whose caller no longer waits (its context
// ended, or it expired), nil while it waits.
func (c *scriptCall) gaveUp(now time.Time) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if !c.expires.IsZero() && !now.Before(c.expires) {
		return context.DeadlineExceeded
	}
	return nil
}

// deadline is when the caller stops waiting: the earlier of its context's
// deadline and expires.
func (c *scriptCall) deadline() (time.Time, bool) {
	d, ok := c.ctx.Deadline()
	if !c.expires.IsZero() && (!ok || c.expires.Before(d)) {
		return c.expires, true
	}
	return d, ok
}

// timers are the stopped timers of run, reused: a call's bound without a
// new timer (and a context derived for it) per call.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// pipeliner sends script calls in pipelines with a group.Loop (NewSpaced):
// a pipeline goes out once one of InFlight slots is free and Interval has
// passed since the one before it was sent (or once it holds MaxCalls), so a
// call after a quiet Interval waits for nothing, and calls arriving
// meanwhile share the next round trip.
type pipeliner struct {
	rdb     redis.UniversalClient
	loop    *group.Loop[*scriptCall]
	timeout time.Duration
	observe func(calls int)
	wait    Wait // see Store.WithWait
	batch   bool // Pipelining.BatchApplies
	onBatch func(applies, undecided int)
}

func newPipeliner(rdb redis.UniversalClient, p Pipelining) *pipeliner {
	if p.InFlight <= 0 {
		p.InFlight = DefaultPipelining.InFlight
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultPipelining.Timeout
	}
	pl := &pipeliner{rdb: rdb, timeout: p.Timeout, observe: p.OnPipeline, batch: p.BatchApplies, onBatch: p.OnBatch}
	pl.loop = group.NewSpaced(p.MaxCalls, p.Interval, p.InFlight, pl.send)
	return pl
}

// run runs script like script.Run (EVALSHA, then EVAL if Redis does not
// have the script) inside the next pipeline. It returns within
// 2 × Timeout + 1s (or ctx's end, if sooner): if the call was not sent by
// then, the script did not run; if it was sent and not answered, it may
// have (see Timeout).
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	bound := 2*p.timeout + time.Second
	t := timers.Get().(*time.Timer)
	t.Reset(bound)
	defer func() { t.Stop(); timers.Put(t) }() // Stop: no stale tick for the next user (Go ≥ 1.23 timers)
	c := &scriptCall{ctx: ctx, expires: time.Now().Add(bound), script: script, keys: keys, args: args, done: make(chan struct{})}
	if err := p.loop.SubmitBefore(ctx, t.C, c); err != nil {
		if errors.Is(err, group.ErrStopped) {
			return nil, redis.ErrClosed
		}
		return nil, err
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		// send still fills c.val and c.err later; nobody reads them.
		return nil, ctx.Err()
	case <-t.C:
		return nil, context.DeadlineExceeded
	}
}

// send runs one pipeline and answers each of its calls.
func (p *pipeliner) send(calls []*scriptCall) {
	live := calls[:0:0]
	now := time.Now()
	for _, c := range calls {
		if err := c.gaveUp(now); err != nil {
			// Not sent: the caller gave up while its call waited for a slot.
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	if p.observe != nil {
		p.observe(len(live))
	}
	// The pipeline's own context ends Timeout from now, or with the last of
	// its callers' deadlines if that is sooner: go-redis then stops
	// retrying and waiting for a pool connection. It does not cut a read in
	// progress (ContextTimeoutEnabled is off: the socket deadlines are the
	// client's read and write timeouts), so one caller's deadline never
	// breaks a connection that carries other callers' scripts.
	last := time.Now().Add(p.timeout)
	latest := time.Time{}
	for _, c := range live {
		if d, ok := c.deadline(); ok && d.After(latest) {
			latest = d
		}
	}
	if !latest.IsZero() && latest.Before(last) {
		last = latest
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	wire, batches := live, []*applyBatch(nil)
	if p.batch {
		wire, batches = batchApplies(live)
	}
	p.exec(ctx, wire)
	var again []*scriptCall
	for _, b := range batches {
		n, answered := len(again), false
		again, answered = b.answer(again)
		if p.onBatch != nil && answered {
			p.onBatch(len(b.members), len(again)-n)
		}
	}
	// What a batch left undecided, each to apply.lua on its own, unless
	// its caller has given up meanwhile (then it is not sent: nothing of it
	// was written).
	now = time.Now()
	send := again[:0]
	for _, c := range again {
		if err := c.gaveUp(now); err != nil {
			c.err = err
			continue
		}
		send = append(send, c)
	}
	if len(send) > 0 {
		p.exec(ctx, send)
	}
	for _, c := range live {
		close(c.done)
	}
}

// exec sends calls as one pipeline (per master on a Redis Cluster, or with
// WAIT) and fills in their answers.
func (p *pipeliner) exec(ctx context.Context, calls []*scriptCall) {
	if _, cluster := p.rdb.(*redis.ClusterClient); cluster || p.wait.on() {
		// One pipeline per master, each on its own connection: go-redis's
		// cluster pipeline, when one master's read times out and the
		// context ends before its retry, gives that error to every call of
		// the pipeline, also those the other masters answered, which then
		// failed and opened those masters' breakers too.
		execGrouped(ctx, p.rdb, calls, p.wait)
		return
	}
	exec(ctx, p.rdb, calls, p.wait)
	for _, c := range calls {
		if c.err != nil {
			relearnSlots(ctx, p.rdb, c.err)
			break
		}
	}
}

func (p *pipeliner) stop() { p.loop.Stop() }
