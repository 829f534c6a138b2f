package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// serveGCPercent is the garbage collector's GOGC for serve unless the GOGC
// environment variable sets one, while the live heap is small. The request
// path allocates a few KiB per request while the live heap stays a few MiB
// (sessions live in Redis, the ledger in MySQL), so at Go's default of 100
// the collector ran about six times a second under 4,000 applies/s and took
// ~15% of the process's CPU per apply; at 400 it runs a quarter as often
// and the heap peaks near 5 × live (about 30 MiB instead of 10 at that
// load; docs/performance-notes.md).
const serveGCPercent = 400

// gcHeadroom bounds what 5 × live costs once the live heap is large: the
// heap may grow by at most this much over the live heap before a
// collection (GOGC lowered down to minGCPercent). Creating 100,000 policies
// in a burst holds ~90 MiB live (the zero series of up to MaxKnown
// resources): at GOGC 400 the heap's goal was ~460 MiB and RSS reached
// 797 MiB without a GOMEMLIMIT, above the Deployment's 768Mi limit
// (issue 23 §1; docs/performance.md, "Many policies").
const gcHeadroom = 128 << 20

// minGCPercent is the least GOGC gcPercentFor sets: the heap may always
// double its live part (Go's default).
const minGCPercent = 100

// gcPercentFor is the GOGC for a live heap of live bytes: serveGCPercent
// while live × serveGCPercent/100 fits in gcHeadroom, then what keeps the
// growth at gcHeadroom, never below minGCPercent. So the heap's goal is
// live × 5 up to 32 MiB live, live + 128 MiB up to 128 MiB live, then
// live × 2.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return serveGCPercent
	}
	p := uint64(gcHeadroom) * 100 / live // ≤ gcHeadroom × 100: fits an int
	return max(minGCPercent, min(serveGCPercent, int(min(p, uint64(serveGCPercent)))))
}

// gcTuneEvery is how often tuneGCLoop reads the live heap.
const gcTuneEvery = 500 * time.Millisecond

// tuneGC sets serveGCPercent unless the operator chose GOGC, and then
// keeps GOGC at gcPercentFor the live heap (read every gcTuneEvery from
// runtime/metrics' /gc/heap/live:bytes, the heap marked live by the last
// collection) for as long as the process runs.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(serveGCPercent)
	go tuneGCLoop()
}

func tuneGCLoop() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	cur := serveGCPercent
	for range time.Tick(gcTuneEvery) {
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return // not measured by this runtime: keep serveGCPercent
		}
		if p := gcPercentFor(s[0].Value.Uint64()); p != cur {
			debug.SetGCPercent(p)
			cur = p
		}
	}
}
