package client

import (
	"context"
	"errors"
	"math"
	"time"
)

// batchSizeLocked is the batch the pool wants: its rate × the target
// period, within [min, max]; the first batch is the configured one.
func (p *LocalPool) batchSizeLocked() int64 {
	if p.lastBatch == 0 {
		return p.cfg.batch
	}
	// The per-second average adapts within seconds; the rate at which the
	// last batch went adapts within one batch (a burst from 200 to a
	// million takes a second would otherwise wait on many small refills).
	rate := p.rate
	if secs := time.Since(p.grantAt).Seconds(); secs > 0 {
		rate = max(rate, float64(p.taken.Load()-p.grantTaken)/secs)
	}
	want := rate * p.cfg.targetPeriod.Seconds()
	if math.IsNaN(want) || want < float64(p.cfg.minBatch) {
		return p.cfg.minBatch
	}
	if want > float64(p.cfg.maxBatch) {
		return p.cfg.maxBatch
	}
	return int64(want)
}

// maybeRefillLocked starts the one refill when the pool runs low (10% of
// the last batch left) or a take of need units cannot be served. The apply
// asks for the batch size minus what the pool still holds, so that what it
// holds unhanded stays within the batch size (at least need).
func (p *LocalPool) maybeRefillLocked(need int64) {
	if p.refilling || p.closed {
		return
	}
	low := float64(p.avail) <= refillFraction*float64(p.lastBatch)
	if !low && p.avail >= need {
		return
	}
	if !p.retryAt.IsZero() && time.Now().Before(p.retryAt) {
		return
	}
	size := p.batchSizeLocked() - p.avail - p.held
	if need > p.avail {
		size = max(size, need-p.avail)
	}
	if size < 1 {
		return
	}
	p.refilling = true
	p.wg.Add(1)
	go p.refill(size)
}

// refill applies for a batch of size (a partial grant of at least 1 is
// taken) and files the answer.
func (p *LocalPool) refill(size int64) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), p.m.finishBudget())
	defer cancel()
	lease, err := p.m.acquire(ctx, p.resource, size, acquireConfig{minAmount: 1, line: p.cfg.line, noGuard: true, noFallback: true, detached: true})
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrQuotaExhausted):
		result = "exhausted"
	case errors.Is(err, ErrUnavailable):
		result = "unavailable"
	default:
		result = "error"
	}
	p.m.met.refills.WithLabelValues(p.resource, result).Inc()

	var giveBack *Lease
	defer func() { // after the unlock below
		if giveBack != nil {
			_, _ = giveBack.Finish(context.Background(), 0)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refilling = false
	defer p.broadcastLocked()
	now := time.Now()
	if err != nil {
		p.failures++
		p.lastErr = err
		wait := backoff(p.m.cfg.retryBase, p.cfg.exhaustedMax, p.failures)
		if ra := min(retryAfter(err), p.cfg.exhaustedMax); ra > wait {
			wait = ra
		}
		p.retryAt = now.Add(wait)
		if errors.Is(err, ErrUnavailable) && p.outageSince.IsZero() {
			p.outageSince, p.safeAt, p.safeTokens = now, now, 0
			p.m.log.Warn("quota-center client: pool in outage mode", "resource", p.resource, "mode", p.cfg.outage.String(), "err", err)
		}
		return
	}
	if p.closed { // Close is waiting for this refill: give the batch straight back
		giveBack = lease
		return
	}
	b := &poolBatch{lease: lease, granted: lease.granted}
	p.batches = append(p.batches, b)
	p.avail += b.granted
	p.lastBatch = b.granted
	p.grantAt, p.grantTaken = now, p.taken.Load()
	p.lastErr, p.failures, p.retryAt = nil, 0, time.Time{}
	if !p.outageSince.IsZero() {
		p.countOutageLocked(now)
		p.outageSince = time.Time{}
		p.reportSafeLocked()
	}
	v := lease.PolicyVersion()
	for _, old := range p.batches[:len(p.batches)-1] {
		if v != "" && old.lease.PolicyVersion() != v {
			p.staleLocked(old)
		}
	}
	lease.mu.Lock()
	lease.onVersion = func(string) { p.onVersion(b) }
	lease.onLost = func() { p.onVersion(b) }
	lease.mu.Unlock()
}

// onVersion: a heartbeat of b's session answered another policy version
// (the limit changed, the period reset, a grant or line changed), or said
// the center swept the session: b is stale, so its unused units go back
// (its session is finished with the units handed out from it) and a fresh
// batch is fetched.
func (p *LocalPool) onVersion(b *poolBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.staleLocked(b)
	p.maybeRefillLocked(0)
}

func (p *LocalPool) staleLocked(b *poolBatch) {
	if b.stale || b.retired {
		return
	}
	p.avail -= b.free()
	b.stale = true
	if b.held == 0 {
		p.retireLocked(b)
	}
}

// detachLocked removes b from the pool and returns it for finishing.
func (p *LocalPool) detachLocked(b *poolBatch) *poolBatch {
	p.avail -= b.free()
	b.retired = true
	for i, x := range p.batches {
		if x == b {
			p.batches = append(p.batches[:i], p.batches[i+1:]...)
			break
		}
	}
	return b
}

// retireLocked finishes b's session with the units handed out from it, in
// the background (a finish the center cannot take is reported later).
func (p *LocalPool) retireLocked(b *poolBatch) {
	p.detachLocked(b)
	used := b.used
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = b.lease.Finish(context.Background(), used)
	}()
}

// reportSafeLocked hands the units served at the outage safe rate to the
// Manager's reports: an apply and a finish of that usage under a session
// id made for it (the one it was spooled under), sent when the center
// answers.
func (p *LocalPool) reportSafeLocked() {
	if p.safeUsed > 0 {
		p.m.pending.add(report{resource: p.resource, sessionID: p.safeSessionLocked(), apply: p.safeUsed, used: p.safeUsed})
	}
	p.safeUsed, p.safeID, p.safeSpooled = 0, "", 0
}

// safeSessionLocked is the session id of the safe-rate usage not yet
// reported, made on first use.
func (p *LocalPool) safeSessionLocked() string {
	if p.safeID == "" {
		p.safeID = newSessionID()
	}
	return p.safeID
}

// spoolSafeLocked writes the safe-rate usage so far to the spool (with
// WithFailOpenSpool), under the id it will be reported with: a process that
// dies in an outage loses at most the last second of it. Under p.mu, so
// that no older total lands after the report (or its done).
func (p *LocalPool) spoolSafeLocked() {
	if p.m.spool == nil || p.safeUsed == p.safeSpooled || p.safeUsed <= 0 {
		return
	}
	p.m.spool.record(spoolRecord{Op: spoolReport, ID: p.safeSessionLocked(), Resource: p.resource, Apply: p.safeUsed, Used: p.safeUsed})
	p.safeSpooled = p.safeUsed
}

// countOutageLocked adds the outage time up to now (seconds) to the fallback
// counter and moves the mark to now. The janitor's tick time and a refill's
// start time are read on different goroutines, so now can be before the mark
// (a tick that fired just before a refill opened the outage): that adds
// nothing and leaves the mark, since a Prometheus counter cannot go down.
func (p *LocalPool) countOutageLocked(now time.Time) {
	if d := now.Sub(p.outageSince); d > 0 {
		p.m.met.fallbackSecs.WithLabelValues(p.resource, p.cfg.outage.String()).Add(d.Seconds())
		p.outageSince = now
	}
}

// broadcastLocked wakes every waiting take.
func (p *LocalPool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// janitor updates the rate average every second, counts outage time and
// returns the batches of an idle pool.
func (p *LocalPool) janitor() {
	defer p.wg.Done()
	tick := min(time.Second, p.cfg.idle/2)
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.tick(now, now.Sub(last))
			last = now
		}
	}
}

func (p *LocalPool) tick(now time.Time, dt time.Duration) {
	taken := p.taken.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	delta := taken - p.rateLast
	p.rateLast = taken
	if secs := dt.Seconds(); secs > 0 {
		w := math.Pow(rateFactor, secs)
		p.rate = w*p.rate + (1-w)*float64(delta)/secs
	}
	p.m.met.batch.WithLabelValues(p.resource).Set(float64(p.batchSizeLocked()))
	if !p.outageSince.IsZero() {
		p.countOutageLocked(now)
	}
	p.spoolSafeLocked()
	if delta > 0 || p.held > 0 || len(p.batches) == 0 {
		p.idleFor = 0
		return
	}
	p.idleFor += dt
	if p.idleFor >= p.cfg.idle {
		for len(p.batches) > 0 {
			p.retireLocked(p.batches[0])
		}
		p.lastBatch = 0
		p.idleFor = 0
	}
}
