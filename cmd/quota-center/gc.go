package main

import (
	"os"
	"runtime/debug"
)

// serveGCPercent is the garbage collector's GOGC for serve unless the GOGC
// environment variable sets one. The request path allocates a few KiB per
// request while the live heap stays a few MiB (sessions live in Redis, the
// ledger in MySQL), so at Go's default of 100 the collector ran about six
// times a second under 4,000 applies/s and took ~15% of the process's CPU
// per apply; at 400 it runs a quarter as often and the heap peaks near
// 5 × live (about 30 MiB instead of 10 at that load; docs/performance-notes.md).
const serveGCPercent = 400

// tuneGC sets serveGCPercent unless the operator chose GOGC.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
}
