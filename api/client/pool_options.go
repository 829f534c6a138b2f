package client

import (
	"fmt"
	"time"
)

// LocalPool defaults: batch 200 as in seed 004; target period, refill at
// 10% and the moving average from CockroachDB's tenant cost controller.
const (
	DefaultBatch        = 200
	DefaultMinBatch     = 50
	DefaultMaxBatch     = 5000
	DefaultTargetPeriod = 10 * time.Second
	DefaultIdleReturn   = 60 * time.Second
	DefaultExhaustedMax = 30 * time.Second // longest wait between batch applies after 429s
	refillFraction      = 0.1              // refill when this share of the last batch is left
	rateFactor          = 0.5              // weight of the past in the per-second rate average
)

// OutageMode is what a LocalPool does while the center does not answer its
// batch applies (Envoy RLQS's no-assignment behaviour, Doorman's safe
// capacity).
type OutageMode int

const (
	// OutageDeny refuses takes that the local batch cannot serve, with an
	// *UnavailableError.
	OutageDeny OutageMode = iota + 1
	// OutageSafeRate serves takes from a local token bucket at the declared
	// safe rate; what it hands out is reported when the center is back
	// (charged exactly once, like fail-open usage).
	OutageSafeRate
)

func (o OutageMode) String() string {
	switch o {
	case OutageDeny:
		return "deny"
	case OutageSafeRate:
		return "safe_rate"
	}
	return fmt.Sprintf("OutageMode(%d)", int(o))
}

type poolConfig struct {
	batch, minBatch, maxBatch int64
	targetPeriod              time.Duration
	idle                      time.Duration
	exhaustedMax              time.Duration
	outage                    OutageMode
	safeRate                  float64 // units per second
	line                      string  // WithLine
}

func defaultPoolConfig() poolConfig {
	return poolConfig{batch: DefaultBatch, minBatch: DefaultMinBatch, maxBatch: DefaultMaxBatch,
		targetPeriod: DefaultTargetPeriod, idle: DefaultIdleReturn, exhaustedMax: DefaultExhaustedMax, outage: OutageDeny}
}

// PoolOption configures a LocalPool (Manager.LocalPool, or every pool of a
// Manager with WithPoolDefaults). A bad value is an error naming the option.
type PoolOption func(*poolConfig) error

// WithBatch sets the first batch (initial) and the bounds the adaptive
// batch stays in: min ≤ initial ≤ max, min ≥ 1. The batch a pool applies
// for is its rate (an exponentially weighted per-second average) × the
// target period, within [min, max]. Defaults 200, 50, 5000. max also bounds
// what one pool holds unhanded (see docs/sdk.md, Bounds).
func WithBatch(initial, min, max int64) PoolOption {
	return func(c *poolConfig) error {
		if min < 1 || initial < min || max < initial || max > MaxAmount {
			return fmt.Errorf("client: WithBatch: want 1 <= min %d <= initial %d <= max %d <= 2^53-1", min, initial, max)
		}
		c.batch, c.minBatch, c.maxBatch = initial, min, max
		return nil
	}
}

// WithTargetPeriod sets how long a batch should last at the observed rate
// (CockroachDB: 10 s, 5–120 s). d > 0; default 10 s.
func WithTargetPeriod(d time.Duration) PoolOption {
	return func(c *poolConfig) error {
		if d <= 0 {
			return fmt.Errorf("client: WithTargetPeriod: %v must be positive", d)
		}
		c.targetPeriod = d
		return nil
	}
}

// WithIdleReturn sets after how long without takes a pool returns its
// unused units to the center. d > 0; default 60 s.
func WithIdleReturn(d time.Duration) PoolOption {
	return func(c *poolConfig) error {
		if d <= 0 {
			return fmt.Errorf("client: WithIdleReturn: %v must be positive", d)
		}
		c.idle = d
		return nil
	}
}

// WithOutage declares what the pool does while the center is away:
// OutageDeny (default; rate ignored) or OutageSafeRate with rate units per
// second (> 0), as Doorman's safe capacity.
func WithOutage(mode OutageMode, rate float64) PoolOption {
	return func(c *poolConfig) error {
		switch {
		case mode == OutageDeny:
		case mode == OutageSafeRate && rate > 0:
		case mode == OutageSafeRate:
			return fmt.Errorf("client: WithOutage: safe rate %v must be positive", rate)
		default:
			return fmt.Errorf("client: WithOutage: unknown outage mode %v", mode)
		}
		c.outage, c.safeRate = mode, rate
		return nil
	}
}

// WithLine makes the pool's batch applies charge the business line line
// (see BusinessLine); "" (default) names none.
func WithLine(line string) PoolOption {
	return func(c *poolConfig) error { c.line = line; return nil }
}

// WithPoolDefaults sets the PoolOptions every LocalPool of the Manager
// starts from; NewManager checks them.
func WithPoolDefaults(opts ...PoolOption) ManagerOption {
	return func(c *managerConfig) error {
		for _, o := range opts {
			if err := o(&c.pool); err != nil {
				return optionError("WithPoolDefaults", "%v", err)
			}
		}
		return nil
	}
}
