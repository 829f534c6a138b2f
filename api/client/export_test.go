package client

import (
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// PoolInvariant checks the pool's books: avail is the sum of its batches'
// free units and held the sum of their reserved ones.
func PoolInvariant(p *LocalPool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var free, held int64
	for _, b := range p.batches {
		free += b.free()
		held += b.held
	}
	if free != p.avail || held != p.held || p.avail < 0 {
		return fmt.Errorf("avail %d, batches free %d; held %d, batches held %d", p.avail, free, p.held, held)
	}
	return nil
}

// Abandon stops m as a process that dies would: no lease is finished, no
// report sent, and its spool file is closed as it is (the lock released).
func Abandon(m *Manager) {
	m.mu.Lock()
	m.closed = true
	for l := range m.leases { // their goroutines stop; nothing is sent
		l.cancel()
	}
	pools := make([]*LocalPool, 0, len(m.pools))
	for p := range m.pools {
		pools = append(pools, p)
	}
	m.mu.Unlock()
	for _, p := range pools { // their janitors and refills stop; nothing is returned
		p.mu.Lock()
		p.closed = true
		close(p.stop)
		p.mu.Unlock()
		p.wg.Wait()
	}
	close(m.stop)
	m.wg.Wait()
	if m.spool != nil {
		m.spool.mu.Lock()
		_ = m.spool.f.Close()
		m.spool.f = nil
		m.spool.mu.Unlock()
	}
}

// OutageTick opens p's outage at mark, runs one janitor tick at now and
// answers the fallback seconds counted for p (quota_client_pool_fallback_
// seconds_total, seconds).
func OutageTick(p *LocalPool, mark, now time.Time) float64 {
	p.mu.Lock()
	p.outageSince = mark
	p.mu.Unlock()
	p.tick(now, time.Second)
	var m dto.Metric
	if err := p.m.met.fallbackSecs.WithLabelValues(p.resource, p.cfg.outage.String()).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
