package quota

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// The catch-up after a rebuild (issue 11, known gap G7). A rebuild reads
// the ledger in one snapshot (SnapshotLedger) while requests are in
// flight: an apply whose reservation was lost with Redis may write its row
// just after the snapshot (the rebuilt balance misses its grant: the limit
// could be exceeded by it), and a finish that settled the old Redis may
// write its row just after (the rebuilt balance holds the grant reserved,
// its session restored USING: a "ghost"). Each such write is bounded by the
// ledger's deadlines, so catchUpAfter later the Service reads the ledger
// again and applies each change once, keyed per session by the balance's
// epoch in the same script that writes the balance: a row the rebuild (or
// an apply since) counted carries the epoch and is left alone.
const (
	// catchUpAfter is the default Options.CatchUpAfter: longer than an
	// apply's insert and read-back (2 s and 1 s by default) and a finish's
	// row update take.
	catchUpAfter = 5 * time.Second
	// catchUpTimeout bounds one catch-up, waiting for the lock included.
	catchUpTimeout = 30 * time.Second
	// catchUpLockTTL is the reconcile lock's TTL while the catch-up holds it.
	catchUpLockTTL = 10 * time.Second
)

// catchUpSlots is the default Options.CatchUpConcurrency. Each catch-up
// holds a resource's reconcile lock and reads every open ledger row of the
// resource, so many at once (1,000 resources first applied within seconds,
// issue 23 §1) made the apply path's own Redis and MySQL calls time out;
// a few at a time keep them in the background, and the waiting ones are
// late by their turn only (what is late past the catch-up is reconciled).
const catchUpSlots = 4

// catchUps are a Service's scheduled, waiting and running catch-ups,
// stopped by Close. A scheduled one (timers) comes due after its delay and
// waits (waiting, queue) for one of the Service's slots. One per resource
// and period waits: a rebuild due while another waits adds its snapshot to
// it, and one due while another runs waits (not queued) until that ends.
// The waiting ones are thus at most one per resource and period: nothing
// is dropped but at Close.
type catchUps struct {
	mu      sync.Mutex
	stopped bool
	timers  map[*time.Timer]struct{}
	waiting map[string]*catchUpJob // by catchUpKey: due, not started
	queue   []string               // waiting keys with none running, oldest first
	running map[string]bool        // by catchUpKey
	wg      sync.WaitGroup         // the running ones
	ctx     context.Context        // cancelled by Close
	cancel  context.CancelFunc
}

// catchUpJob is one due catch-up: the rebuilt period and the open rows of
// its snapshot(s).
type catchUpJob struct {
	pol  Policy
	per  Period
	snap []UsageRecord
}

func catchUpKey(resource string, per Period) string {
	return resource + "@" + strconv.FormatInt(per.ID(), 10)
}

// catchUpLater schedules the catch-up of the period's rebuild, whose
// snapshot held the open rows snap.
func (s *Service) catchUpLater(pol Policy, per Period, snap []UsageRecord) {
	d, ok := catchUpDelay(s.opt.CatchUpAfter)
	if !ok {
		return
	}
	c := &s.catchUps
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	if c.timers == nil {
		c.timers = map[*time.Timer]struct{}{}
		c.waiting = map[string]*catchUpJob{}
		c.running = map[string]bool{}
		c.ctx, c.cancel = context.WithCancel(context.Background())
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.timers[t]; !ok {
			return // stopped
		}
		delete(c.timers, t)
		s.dueCatchUp(catchUpJob{pol: pol, per: per, snap: snap})
	})
	c.timers[t] = struct{}{}
}

// dueCatchUp makes job wait for a slot, or joins it to the one of its
// resource and period waiting already: the newer policy, both snapshots
// (finishing a row twice replays, finish.lua). c.mu is held.
func (s *Service) dueCatchUp(job catchUpJob) {
	c := &s.catchUps
	key := catchUpKey(job.pol.ResourceName, job.per)
	if w, ok := c.waiting[key]; ok {
		// A full slice expression: the seeder's slice is not written to.
		w.pol, w.snap = job.pol, append(w.snap[:len(w.snap):len(w.snap)], job.snap...)
		return
	}
	c.waiting[key] = &job
	if !c.running[key] {
		c.queue = append(c.queue, key)
	}
	s.startCatchUps()
}

// startCatchUps starts the oldest waiting catch-ups while a slot is free.
// c.mu is held.
func (s *Service) startCatchUps() {
	c := &s.catchUps
	for !c.stopped && len(c.running) < s.opt.CatchUpConcurrency && len(c.queue) > 0 {
		key := c.queue[0]
		c.queue[0] = ""
		c.queue = c.queue[1:]
		job := c.waiting[key]
		delete(c.waiting, key)
		c.running[key] = true
		c.wg.Add(1)
		go s.runCatchUp(c.ctx, key, *job)
	}
}

// runCatchUp runs one catch-up, reports it to OnCatchUp, and frees its
// slot for the oldest waiting one; its own resource's next one, if one
// came due meanwhile, joins the queue at its end.
func (s *Service) runCatchUp(base context.Context, key string, job catchUpJob) {
	c := &s.catchUps
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(base, catchUpTimeout)
	err := s.catchUp(ctx, job.pol, job.per, job.snap)
	cancel()
	if s.opt.OnCatchUp != nil {
		s.opt.OnCatchUp(job.pol.ResourceName, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, key)
	if _, ok := c.waiting[key]; ok {
		c.queue = append(c.queue, key)
	}
	s.startCatchUps()
}

// catchUpDelay is how long after a rebuild its catch-up runs, for
// Options.CatchUpAfter after: after itself, catchUpAfter (5 s) for 0;
// ok false (never) for a negative after.
func catchUpDelay(after time.Duration) (d time.Duration, ok bool) {
	if after < 0 {
		return 0, false
	}
	if after == 0 {
		return catchUpAfter, true
	}
	return after, true
}

// stopCatchUps drops the catch-ups not started (scheduled or waiting; the
// next reconciliation repairs what they would have) and waits for the
// running ones, whose context it cancels.
func (s *Service) stopCatchUps() {
	c := &s.catchUps
	c.mu.Lock()
	c.stopped = true
	for t := range c.timers {
		t.Stop()
	}
	c.timers, c.waiting, c.queue = nil, nil, nil
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// catchUp reads the ledger again and brings the rebuilt balance of per up
// to it: rows opened since the snapshot are counted (CatchUp), and rows of
// the snapshot settled since as FINISHED are finished in the store with
// their ledger actual (finish.lua: a session still USING there is a ghost;
// one finished already replays and changes nothing). Rows swept since as
// LEAKED are left to the sweeper, which charges the restored session as
// the ledger did. It holds the resource's reconcile lock, so that no drift
// correction measured before it is written after it. Pools' rows opened
// since are counted in 'reserved' like the others (their sessions carry
// the epoch, apply.lua), but their pool counters are not touched, and
// pools' rows of the snapshot settled since are not finished here: the
// pool counters are rebuilt by a second ledger read outside the snapshot,
// so whether that read counted a late row or its refund is not known here
// (docs/reliability.md, G7, "Pools' sessions").
func (s *Service) catchUp(ctx context.Context, pol Policy, per Period, snap []UsageRecord) (err error) {
	sl, ok := s.ledger.(SnapshotLedger)
	if !ok {
		return nil
	}
	token, err := s.waitLock(ctx, pol.ResourceName, "reconcile")
	if err != nil {
		return err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.balances.Unlock(uctx, pol.ResourceName, "reconcile", token)
	}()
	ctx, stop := KeepLock(ctx, s.balances, s.redis, pol.ResourceName, "reconcile", token, catchUpLockTTL)
	defer stop()
	defer func() { err = LockLost(ctx, err) }()
	fence := Fence{Name: "reconcile", Token: token}

	var opened []UsageRecord
	for after := int64(0); ; {
		page, next, err := s.openSessions(ctx, pol.ResourceName, after)
		if err != nil {
			return err
		}
		for _, r := range page {
			if r.PeriodStart.Equal(per.Start) {
				opened = append(opened, r)
			}
		}
		after = next
		if len(page) < seedPage {
			break
		}
	}
	err = GuardErr(s.redisFor(pol.ResourceName), func() error {
		return s.balances.CatchUp(ctx, fence, pol.ResourceName, per, opened, pol.LeaseDuration())
	})
	if err != nil {
		return err
	}

	var ids []string
	for _, r := range snap {
		if r.PeriodStart.Equal(per.Start) && !r.PoolSession() {
			ids = append(ids, r.SessionID)
		}
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), seedPage)]
		ids = ids[len(chunk):]
		var rows map[string]UsageRecord
		err := GuardErr(s.mysql, func() (err error) {
			rows, err = sl.SessionsByID(ctx, chunk)
			return err
		})
		if err != nil {
			return err
		}
		for _, id := range chunk {
			row, ok := rows[id]
			if !ok || row.Status != StatusFinished {
				continue
			}
			_, err := Guard(s.redisFor(pol.ResourceName), func() (FinishResult, error) {
				return s.balances.Finish(ctx, FinishCmd{ResourceName: pol.ResourceName, SessionID: id,
					Actual: row.ChargedAmount, Retention: s.opt.FinishedRetention})
			})
			if err != nil && !errors.Is(err, ErrSessionNotFound) && !errors.Is(err, ErrSessionConflict) {
				return err
			}
		}
	}
	return nil
}

// waitLock takes the named lock of resource, trying again every
// catchUpLockTTL/40 while another holder has it, until ctx ends.
func (s *Service) waitLock(ctx context.Context, resource, name string) (string, error) {
	for {
		token, err := Guard(s.redisFor(resource), func() (string, error) {
			return s.balances.TryLock(ctx, resource, name, catchUpLockTTL)
		})
		if err != nil || token != "" {
			return token, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(catchUpLockTTL / 40):
		}
	}
}
