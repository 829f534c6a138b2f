package mysqlstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// batchOp is one group-committed ledger operation (an insert, a finish) on
// items of type T.
// flushConcurrency bounds the group-commit statements of one batcher in
// flight at once.
const flushConcurrency = 4

type batchOp[T any] struct {
	// name prefixes errors: name + " " + id(item), e.g. "insert session s-1".
	name string
	id   func(T) string
	// write runs one statement for items: all of them or none.
	write func(ctx context.Context, items []T) error
	// fail turns a write error into the error one caller gets (err != nil).
	fail func(item T, err error) error
}

// batchReq is one call waiting for its item to be committed.
type batchReq[T any] struct {
	ctx  context.Context
	item T
	done chan error // buffered(1): the batcher never blocks on a caller
}

// batcher group-commits one operation: one goroutine takes the first waiting
// item, collects more for up to maxWait or until maxRows, writes them with
// one statement and answers every caller. If that statement fails (other
// than by the database being unreachable), the items are retried one by one
// so that each caller gets its own answer.
type batcher[T any] struct {
	op      batchOp[T]
	timeout time.Duration // of each statement
	maxRows int
	maxWait time.Duration

	reqs     chan *batchReq[T] // unbuffered: an item is handed over only when the batcher takes it
	slots    chan struct{}     // one per statement in flight (flushConcurrency)
	flushing sync.WaitGroup
	quit     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once
}

func newBatcher[T any](op batchOp[T], timeout time.Duration, maxRows int, maxWait time.Duration) *batcher[T] {
	b := &batcher[T]{
		op:      op,
		timeout: timeout,
		maxRows: maxRows,
		maxWait: maxWait,
		reqs:    make(chan *batchReq[T]),
		slots:   make(chan struct{}, flushConcurrency),
		quit:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	go b.run()
	return b
}

// stop ends the goroutine after the batch in flight, if any, is answered.
func (b *batcher[T]) stop() {
	b.stopOnce.Do(func() { close(b.quit) })
	<-b.exited
}

// do hands item to the batcher and waits for its outcome. If ctx is done
// before the batcher takes the item, or while the item waits for company,
// it returns ctx's error and the item is not written.
func (b *batcher[T]) do(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return b.ctxError(item, err)
	}
	req := &batchReq[T]{ctx: ctx, item: item, done: make(chan error, 1)}
	select {
	case b.reqs <- req:
	case <-ctx.Done():
		return b.ctxError(item, ctx.Err())
	case <-b.quit:
		return fmt.Errorf("%s %s: %w: %w", b.op.name, b.op.id(item), quota.ErrUnavailable, errClosed)
	}
	// Handed over: the batcher answers within a bounded time (statement
	// timeouts).
	return <-req.done
}

func (b *batcher[T]) ctxError(item T, err error) error {
	return fmt.Errorf("%s %s: %w", b.op.name, b.op.id(item), err)
}

func (b *batcher[T]) run() {
	defer close(b.exited)
	batch := make([]*batchReq[T], 0, b.maxRows)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer b.flushing.Wait()
	for {
		select {
		case r := <-b.reqs:
			batch = append(batch[:0], r)
		case <-b.quit:
			return
		}
		timer.Reset(b.maxWait)
	collect:
		for len(batch) < b.maxRows {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			case <-timer.C:
				break collect
			case <-b.quit:
				break collect
			}
		}
		timer.Stop()
		// Up to flushConcurrency statements run at once, so one commit's
		// fsync does not hold up the next batch; when all are busy, callers
		// wait here, and the next batch grows meanwhile.
		b.slots <- struct{}{}
		b.flushing.Add(1)
		go func(batch []*batchReq[T]) {
			defer func() { <-b.slots; b.flushing.Done() }()
			b.flush(batch)
		}(slices.Clone(batch))
		clear(batch) // the clone holds the requests now
	}
}

// flush writes the items of the live requests of batch and answers each.
func (b *batcher[T]) flush(batch []*batchReq[T]) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			// Not sent: the caller gave up while its item waited for company.
			r.done <- b.ctxError(r.item, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	items := make([]T, len(live))
	for i, r := range live {
		items[i] = r.item
	}
	err := b.exec(items)
	if err == nil || len(live) == 1 || isUnavailable(err) {
		// Done, or the database is not answering: one-by-one retries would
		// each wait for the same failure.
		b.answer(live, err)
		return
	}
	// One statement is all or nothing; retry item by item, in arrival order,
	// so that, e.g., one duplicate only fails its own caller.
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

// insertOp group-commits InsertSession.
func (s *Store) insertOp() batchOp[quota.UsageRecord] {
	return batchOp[quota.UsageRecord]{name: "insert session", id: sessionID, write: s.insertRows,
		fail: func(r quota.UsageRecord, err error) error { return insertError(r.SessionID, err) }}
}

// finishOp group-commits FinishSession.
func (s *Store) finishOp() batchOp[quota.UsageRecord] {
	return batchOp[quota.UsageRecord]{name: "finish session", id: sessionID, write: s.finishRows,
		fail: func(r quota.UsageRecord, err error) error { return translate("finish session "+r.SessionID, err) }}
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
