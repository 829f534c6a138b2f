package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/group"
	"github.com/quotacenter/quota-center/internal/quota"
)

// flushConcurrency bounds the group commits of one group loop in flight at
// once: one (the session inserts and finishes share a loop, together.go).
// While a group's statement and its commit (fsync) run, the next group is
// formed by the rows that arrive meanwhile, and goes out as soon as the
// statement returns. There is no timer: a lone row finds
// the slot free and is written at once, and under load each group is what
// came while the previous statement was in flight. Two slots (the stages of
// MySQL's binlog group commit, which this was until measured otherwise)
// halved the groups without merging their fsyncs on MariaDB (one fsync per
// statement either way, and a statement costs the server ~160 µs of CPU
// besides its rows): at 50 connections rows per statement went from ~10 to
// ~15 with one slot, and MariaDB's CPU per apply fell ~16% at the same
// request rate and latency (docs/performance-notes.md).
const flushConcurrency = 1

// batchOp is one group-committed ledger operation (an insert, a finish) on
// items of type T.
type batchOp[T any] struct {
	// name prefixes errors: name + " " + id(item), e.g. "insert session s-1".
	name string
	id   func(T) string
	// write runs one statement for items: all of them or none.
	write func(ctx context.Context, items []T) error
	// fail turns a write error into the error one caller gets (err != nil).
	fail func(item T, err error) error
	// observe, when set, gets the rows of each group-commit statement.
	observe func(rows int)
}

// batchReq is one call waiting for its item to be committed.
type batchReq[T any] struct {
	ctx context.Context
	// deadline, when not zero, is the caller's own deadline besides ctx's
	// (doBefore): past it the item is not sent.
	deadline time.Time
	item     T
	by       *batcher[T] // whose op writes item (batchers may share a loop)
	done     chan error  // buffered(1): the batcher never blocks on a caller
}

// batcher group-commits one operation with a group.Loop: a group is written
// with one statement as soon as a statement slot is free (and, only when
// maxWait > 0, its first item has waited that long for company) or the
// group is full, and every caller is answered. If that statement fails (other than by the database being
// unreachable), the items are retried one by one so that each caller gets
// its own answer.
type batcher[T any] struct {
	op      batchOp[T]
	timeout time.Duration // of each statement
	loop    *group.Loop[*batchReq[T]]
}

func newBatcher[T any](op batchOp[T], timeout time.Duration, maxRows int, maxWait time.Duration) *batcher[T] {
	b := &batcher[T]{op: op, timeout: timeout}
	b.loop = group.New(maxRows, maxWait, flushConcurrency, b.flush)
	return b
}

// stop ends the batcher after the groups in flight are answered.
func (b *batcher[T]) stop() { b.loop.Stop() }

// do hands item to the batcher and waits for its outcome. If ctx is done
// before the batcher takes the item, or while the item waits for company,
// it returns ctx's error and the item is not written.
func (b *batcher[T]) do(ctx context.Context, item T) error {
	return b.doBefore(ctx, time.Time{}, item)
}

// expiryTimers are doBefore's timers, reused: a pooled timer's Reset and
// Stop cost no allocation, where a context derived with the deadline costs
// a context, a timer and a registration with the caller's context per call.
var expiryTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// doBefore is do that also gives up at deadline (zero: never) as it does
// when ctx ends: if deadline passes before the batcher takes the item, or
// while the item waits for company, it returns an error wrapping
// context.DeadlineExceeded and the item is not written. Once the item is
// sent, it waits for the outcome, as do does.
func (b *batcher[T]) doBefore(ctx context.Context, deadline time.Time, item T) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		wait := time.Until(deadline)
		if wait <= 0 {
			return b.ctxError(item, context.DeadlineExceeded)
		}
		t := expiryTimers.Get().(*time.Timer)
		t.Reset(wait)
		// Stop: no stale tick for the timer's next user (Go ≥ 1.23 timers).
		defer func() { t.Stop(); expiryTimers.Put(t) }()
		expired = t.C
	}
	req := &batchReq[T]{ctx: ctx, deadline: deadline, item: item, by: b, done: make(chan error, 1)}
	// Join: the row that starts a group writes it from this goroutine; if
	// ctx ends (or deadline passes) while it waits for the slot, the row is
	// not written (flush skips a request whose caller gave up).
	if err := b.loop.Join(ctx, expired, req); err != nil {
		if errors.Is(err, group.ErrStopped) {
			return fmt.Errorf("%s %s: %w: %w", b.op.name, b.op.id(item), quota.ErrUnavailable, errClosed)
		}
		return b.ctxError(item, err)
	}
	// Handed over: the batcher answers within a bounded time (statement
	// timeouts).
	return <-req.done
}

func (b *batcher[T]) ctxError(item T, err error) error {
	return fmt.Errorf("%s %s: %w", b.op.name, b.op.id(item), err)
}

// flush writes the items of the live requests of batch and answers each.
func (b *batcher[T]) flush(batch []*batchReq[T]) { b.write(b.live(batch)) }

// live answers the requests of batch whose caller gave up while its item
// waited for company (those items are not sent) and returns the others.
func (b *batcher[T]) live(batch []*batchReq[T]) []*batchReq[T] {
	live := batch[:0:0]
	var now time.Time // read once, if a request has a deadline
	for _, r := range batch {
		err := r.ctx.Err()
		if err == nil && !r.deadline.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if !now.Before(r.deadline) {
				err = context.DeadlineExceeded
			}
		}
		if err != nil {
			r.done <- b.ctxError(r.item, err)
			continue
		}
		live = append(live, r)
	}
	return live
}

// items returns the items of reqs and tells observe their number.
func (b *batcher[T]) items(reqs []*batchReq[T]) []T {
	items := make([]T, len(reqs))
	for i, r := range reqs {
		items[i] = r.item
	}
	if b.op.observe != nil && len(items) > 0 {
		b.op.observe(len(items))
	}
	return items
}

// write writes the items of live (none: nothing) with one statement and
// answers each request (see settle).
func (b *batcher[T]) write(live []*batchReq[T]) {
	if len(live) == 0 {
		return
	}
	items := b.items(live)
	b.settle(live, items, b.exec(items))
}

// settle answers the requests of live, whose items one statement wrote
// with the outcome err. If it failed other than by the database being
// unreachable, the items are retried one by one, in arrival order, so that,
// e.g., one duplicate only fails its own caller.
func (b *batcher[T]) settle(live []*batchReq[T], items []T, err error) {
	if err == nil || len(live) == 1 || isUnavailable(err) {
		// Done, or the database is not answering: one-by-one retries would
		// each wait for the same failure.
		b.answer(live, err)
		return
	}
	for i := range live {
		rerr := b.exec(items[i : i+1])
		b.answer(live[i:i+1], rerr)
		if isUnavailable(rerr) {
			b.answer(live[i+1:], rerr)
			return
		}
	}
}

// answer gives the outcome err to every request of reqs.
func (b *batcher[T]) answer(reqs []*batchReq[T], err error) {
	for _, r := range reqs {
		if err == nil {
			r.done <- nil
		} else {
			r.done <- b.op.fail(r.item, err)
		}
	}
}

// exec runs one statement for items under the statement timeout.
func (b *batcher[T]) exec(items []T) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	return b.op.write(ctx, items)
}

// sessionID is the batch id of a ledger record.
func sessionID(r quota.UsageRecord) string { return r.SessionID }

// insertOp group-commits InsertSession; on, if set, sees each group's rows.
func (s *Store) insertOp(on func(op string, rows int)) batchOp[quota.UsageRecord] {
	return batchOp[quota.UsageRecord]{name: "insert session", id: sessionID, write: s.insertRows,
		fail:    func(r quota.UsageRecord, err error) error { return insertError(r.SessionID, err) },
		observe: observer(on, "insert")}
}

// finishOp group-commits FinishSession; on, if set, sees each group's rows.
func (s *Store) finishOp(on func(op string, rows int)) batchOp[quota.UsageRecord] {
	return batchOp[quota.UsageRecord]{name: "finish session", id: sessionID, write: s.finishRows,
		fail:    func(r quota.UsageRecord, err error) error { return translate("finish session "+r.SessionID, err) },
		observe: observer(on, "finish")}
}

func observer(on func(op string, rows int), op string) func(int) {
	if on == nil {
		return nil
	}
	return func(rows int) { on(op, rows) }
}

// insertError translates the outcome of one session's insert: nil stays
// nil, a unique-key violation wraps quota.ErrDuplicateSession.
func insertError(sessionID string, err error) error {
	if err == nil {
		return nil
	}
	op := "insert session " + sessionID
	if isDuplicateKey(err) {
		return fmt.Errorf("%s: %w: %w", op, quota.ErrDuplicateSession, err)
	}
	return translate(op, err)
}
