package mysqlstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// insertReq is one InsertSession call waiting for its row to be committed.
type insertReq struct {
	ctx  context.Context
	rec  quota.UsageRecord
	done chan error // buffered(1): the batcher never blocks on a caller
}

// batcher group-commits ledger inserts: one goroutine takes the first
// waiting row, collects more for up to maxWait or until maxRows, writes them
// with one INSERT and answers every caller.
type batcher struct {
	s       *Store
	maxRows int
	maxWait time.Duration

	reqs     chan *insertReq // unbuffered: a row is handed over only when the batcher takes it
	quit     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once
}

func newBatcher(s *Store, maxRows int, maxWait time.Duration) *batcher {
	b := &batcher{
		s:       s,
		maxRows: maxRows,
		maxWait: maxWait,
		reqs:    make(chan *insertReq),
		quit:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	go b.run()
	return b
}

// stop ends the goroutine after the batch in flight, if any, is answered.
func (b *batcher) stop() {
	b.stopOnce.Do(func() { close(b.quit) })
	<-b.exited
}

// insert hands rec to the batcher and waits for its outcome.
func (b *batcher) insert(ctx context.Context, rec quota.UsageRecord) error {
	op := "insert session " + rec.SessionID
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req := &insertReq{ctx: ctx, rec: rec, done: make(chan error, 1)}
	select {
	case b.reqs <- req:
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	case <-b.quit:
		return fmt.Errorf("%s: %w: %w", op, quota.ErrUnavailable, errClosed)
	}
	// Handed over: the batcher answers within a bounded time (query timeout).
	return <-req.done
}

func (b *batcher) run() {
	defer close(b.exited)
	batch := make([]*insertReq, 0, b.maxRows)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
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
		b.flush(batch)
		clear(batch) // drop references to answered requests
	}
}

// flush writes the rows of the live requests of batch and answers each.
func (b *batcher) flush(batch []*insertReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			// Not sent: the caller gave up while its row waited for company.
			r.done <- fmt.Errorf("insert session %s: %w", r.rec.SessionID, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	recs := make([]quota.UsageRecord, len(live))
	for i, r := range live {
		recs[i] = r.rec
	}
	err := b.exec(recs)
	if err == nil || len(live) == 1 || isUnavailable(err) {
		// Done, or the database is not answering: one-by-one retries would
		// each wait for the same failure.
		answer(live, err)
		return
	}
	// One statement is all or nothing; retry row by row so that, e.g., one
	// duplicate only fails its own caller.
	for i, r := range live {
		rerr := b.exec(recs[i : i+1])
		r.done <- insertError(r.rec.SessionID, rerr)
		if isUnavailable(rerr) {
			answer(live[i+1:], rerr)
			return
		}
	}
}

// answer gives the outcome err to every request of reqs.
func answer(reqs []*insertReq, err error) {
	for _, r := range reqs {
		r.done <- insertError(r.rec.SessionID, err)
	}
}

// exec runs one INSERT of recs under the query timeout.
func (b *batcher) exec(recs []quota.UsageRecord) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.s.timeout)
	defer cancel()
	return b.s.insertRows(ctx, recs)
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
