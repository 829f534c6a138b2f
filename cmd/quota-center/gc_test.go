package main

import "testing"

// The heap's goal, live × (1 + GOGC/100), is 5 × live for a small live
// heap (the request path's GOGC 400), at most live + 128 MiB beyond 32
// MiB live, and 2 × live beyond 128 MiB: a burst holding ~90 MiB live
// gets a goal of ~217 MiB, not ~450 (issue 23 §1).
func TestGCPercentBoundsTheHeapsGrowth(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		goal uint64 // MiB
	}{{0, 0}, {8 * mib, 40}, {32 * mib, 160}, {64 * mib, 192}, {90 * mib, 217}, {128 * mib, 256}, {300 * mib, 600}} {
		p := gcPercentFor(c.live)
		if goal := c.live * uint64(100+p) / 100 / mib; goal != c.goal {
			t.Errorf("live %d MiB: GOGC %d, goal %d MiB, want %d", c.live/mib, p, goal, c.goal)
		}
	}
}
