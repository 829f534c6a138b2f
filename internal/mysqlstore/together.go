package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/quotacenter/quota-center/internal/group"
	"github.com/quotacenter/quota-center/internal/quota"
)

// newSessionBatchers returns the batchers of InsertSession and
// FinishSession, which share one group.Loop (one group in flight): a group
// is every insert and finish that waited while the one before it was
// written, and when it holds both kinds its INSERT and its finish UPDATE
// run in one transaction (see flushSessions). Both are committed by one
// COMMIT, one redo log write and fsync, where two statements of their own
// each paid one; on MariaDB a statement's commit is a good part of the
// ~160 µs of CPU it costs besides its rows (docs/performance-notes.md).
// Durability is the same: a caller is answered once the COMMIT of its row
// returned.
func (s *Store) newSessionBatchers(opts Options) (inserts, finishes *batcher[quota.UsageRecord]) {
	inserts = &batcher[quota.UsageRecord]{op: s.insertOp(opts.OnGroupCommit), timeout: s.timeout}
	finishes = &batcher[quota.UsageRecord]{op: s.finishOp(opts.OnGroupCommit), timeout: s.timeout}
	loop := group.New(opts.BatchMaxRows, opts.BatchMaxWait, flushConcurrency,
		func(batch []*batchReq[quota.UsageRecord]) { s.flushSessions(inserts, finishes, batch) })
	inserts.loop, finishes.loop = loop, loop
	return inserts, finishes
}

// flushSessions writes one group of newSessionBatchers and answers every
// request of it. A group of one kind is that kind's statement alone, as a
// batcher of its own writes it. A group of both is one transaction: the
// INSERT, then the finish UPDATE, then COMMIT. If a statement of it fails
// other than by the database being unreachable, the transaction is rolled
// back and each kind is written on its own, as if the other had not been in
// the group: the failed statement's rows are retried one by one (so a
// duplicate session id fails its own apply only), the other kind's as one
// statement. If the database is unreachable, or BEGIN or COMMIT fails,
// every caller gets that error, as with one statement that failed so.
func (s *Store) flushSessions(inserts, finishes *batcher[quota.UsageRecord], batch []*batchReq[quota.UsageRecord]) {
	var ins, fin []*batchReq[quota.UsageRecord]
	for _, r := range batch {
		if r.by == finishes {
			fin = append(fin, r)
		} else {
			ins = append(ins, r)
		}
	}
	ins, fin = inserts.live(ins), finishes.live(fin)
	if len(ins) == 0 || len(fin) == 0 {
		inserts.write(ins)
		finishes.write(fin)
		return
	}
	insItems, finItems := inserts.items(ins), finishes.items(fin)
	failed, err := s.insertAndFinish(insItems, finItems)
	switch {
	case err == nil || failed == stageBeginOrCommit || isUnavailable(err):
		// Committed; or the database is not answering, or refused to begin
		// or to commit the transaction, whose outcome the caller then
		// handles as that of a failed statement.
		inserts.answer(ins, err)
		finishes.answer(fin, err)
	case failed == stageInsert:
		inserts.settle(ins, insItems, err)
		finishes.write(fin)
	default: // the finish UPDATE failed
		inserts.write(ins)
		finishes.settle(fin, finItems, err)
	}
}

// txStage names the step of insertAndFinish that failed.
type txStage int

const (
	stageBeginOrCommit txStage = iota
	stageInsert
	stageFinish
)

// insertAndFinish inserts ins (as insertRows) and settles fin (as
// finishRows) in one transaction under the statement timeout, and reports
// the step that failed, if one did; the transaction is then rolled back.
func (s *Store) insertAndFinish(ins, fin []quota.UsageRecord) (txStage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return stageBeginOrCommit, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if err := s.insertStmts.exec(ctx, tx, len(ins), insertArgs(ins)); err != nil {
		return stageInsert, timedOut(ctx, err)
	}
	if err := s.execFinish(ctx, tx, fin); err != nil {
		return stageFinish, timedOut(ctx, err)
	}
	return stageBeginOrCommit, timedOut(ctx, tx.Commit())
}

// timedOut returns err, joined with ctx's error when err is sql.ErrTxDone
// and ctx has ended: database/sql rolls a transaction back as soon as its
// context ends, and every later statement or Commit answers ErrTxDone, which
// alone reads as a bug (a 500) rather than a database that did not answer in
// time (quota.ErrUnavailable: a 503, the apply compensated). Nothing was
// committed in that case.
func timedOut(ctx context.Context, err error) error {
	if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
