package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
)

// memoryLimitPercent is the share of the container's memory limit that
// serve gives the Go runtime as its soft limit (GOMEMLIMIT): the rest is
// headroom for what the runtime does not count (thread stacks outside the
// heap's accounting, fragmentation, the page cache of the read-only root)
// and for a collection that is late, so that the GC works harder before the
// kernel's OOM killer acts. At 100 % (the limit itself) there was none.
const memoryLimitPercent = 90

// minProcs is the least GOMAXPROCS serve sets from a CPU request: Go's
// own container-aware default never goes below 2 either, since with one P
// the collector's work competes with every request for the only P.
const minProcs = 2

// tuneRuntime sizes the Go runtime to the container's resources, as the
// Kubernetes Deployment passes them through the downward API:
//
//   - QC_MEMORY_LIMIT_BYTES (limits.memory, bytes): the soft memory limit
//     becomes memoryLimitPercent of it, unless GOMEMLIMIT is set.
//   - QC_CPU_REQUEST_MILLICORES (requests.cpu with divisor 1m): GOMAXPROCS
//     becomes the request rounded up to whole CPUs, at least minProcs,
//     unless GOMAXPROCS is set, and never above the runtime's default.
//     Go 1.25+ already lowers that default to a CPU limit (cgroup cpu.max),
//     but the Deployment sets no CPU limit (CFS throttling hurts latency),
//     so without this every instance would run one P per CPU of its node.
//
// It returns an error for a value that is not a positive whole number.
func tuneRuntime(lookup func(string) (string, bool)) error {
	if _, set := lookup("GOMEMLIMIT"); !set {
		if v, ok := lookup("QC_MEMORY_LIMIT_BYTES"); ok && v != "" {
			n, err := positive("QC_MEMORY_LIMIT_BYTES", v)
			if err != nil {
				return err
			}
			debug.SetMemoryLimit(softMemoryLimit(n))
		}
	}
	if _, set := lookup("GOMAXPROCS"); !set {
		if v, ok := lookup("QC_CPU_REQUEST_MILLICORES"); ok && v != "" {
			m, err := positive("QC_CPU_REQUEST_MILLICORES", v)
			if err != nil {
				return err
			}
			runtime.GOMAXPROCS(procsFor(m, runtime.GOMAXPROCS(0)))
		}
	}
	return nil
}

// softMemoryLimit is memoryLimitPercent of limit bytes.
func softMemoryLimit(limit int64) int64 { return limit / 100 * memoryLimitPercent }

// procsFor is GOMAXPROCS for a CPU request of millicores: whole CPUs
// rounded up, at least minProcs, at most current (the runtime's default:
// the node's CPUs, or the container's CPU limit).
func procsFor(millicores int64, current int) int {
	n := max(int((millicores+999)/1000), minProcs)
	return min(n, current)
}

func positive(name, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive whole number", name, v)
	}
	return n, nil
}

// tuneServe applies tuneGC and tuneRuntime from the process environment.
func tuneServe() error {
	tuneGC()
	return tuneRuntime(os.LookupEnv)
}
