package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// The soft memory limit is 90 % of the container's limit, not all of it
// (issue 22 §9: GOMEMLIMIT was the limit itself, leaving no headroom).
func TestSoftMemoryLimitLeavesHeadroom(t *testing.T) {
	for _, give := range []int64{128 << 20, 256 << 20, 1 << 30, 10_000_000_001} {
		if got := softMemoryLimit(give); got > give*90/100 || got < give*89/100 {
			t.Errorf("softMemoryLimit(%d) = %d, want 90 %% of it", give, got)
		}
	}
}

func TestProcsForACPURequest(t *testing.T) {
	tests := []struct {
		name       string
		millicores int64
		current    int
		want       int
	}{
		{"a quarter CPU gets the floor of 2", 250, 64, 2},
		{"1500m rounds up to 2", 1500, 64, 2},
		{"2001m rounds up to 3", 2001, 64, 3},
		{"4 CPUs", 4000, 64, 4},
		{"never above the runtime's default (a CPU limit or the node)", 8000, 3, 3},
		{"a one-CPU node stays at 1", 250, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := procsFor(tt.millicores, tt.current); got != tt.want {
				t.Errorf("procsFor(%d, %d) = %d, want %d", tt.millicores, tt.current, got, tt.want)
			}
		})
	}
}

// tuneRuntime applies the downward API's values unless GOMEMLIMIT or
// GOMAXPROCS is set, and refuses values that are not positive numbers.
func TestTuneRuntime(t *testing.T) {
	prevMem, prevProcs := debug.SetMemoryLimit(-1), runtime.GOMAXPROCS(0)
	t.Cleanup(func() { debug.SetMemoryLimit(prevMem); runtime.GOMAXPROCS(prevProcs) })
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}

	if err := tuneRuntime(env(map[string]string{"QC_MEMORY_LIMIT_BYTES": "268435456"})); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 268435456/100*90 {
		t.Errorf("soft memory limit %d, want %d", got, 268435456/100*90)
	}
	debug.SetMemoryLimit(prevMem)
	if err := tuneRuntime(env(map[string]string{"QC_MEMORY_LIMIT_BYTES": "268435456", "GOMEMLIMIT": "100MiB"})); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != prevMem {
		t.Errorf("GOMEMLIMIT set, yet the limit changed to %d", got)
	}

	if runtime.NumCPU() >= 2 {
		runtime.GOMAXPROCS(runtime.NumCPU())
		if err := tuneRuntime(env(map[string]string{"QC_CPU_REQUEST_MILLICORES": "250"})); err != nil {
			t.Fatal(err)
		}
		if got := runtime.GOMAXPROCS(0); got != 2 {
			t.Errorf("GOMAXPROCS %d after a 250m request, want 2", got)
		}
	}
	runtime.GOMAXPROCS(prevProcs)
	if err := tuneRuntime(env(map[string]string{"QC_CPU_REQUEST_MILLICORES": "250", "GOMAXPROCS": "7"})); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != prevProcs {
		t.Errorf("GOMAXPROCS set, yet it changed to %d", got)
	}

	for _, bad := range []map[string]string{
		{"QC_MEMORY_LIMIT_BYTES": "256Mi"}, {"QC_MEMORY_LIMIT_BYTES": "0"}, {"QC_CPU_REQUEST_MILLICORES": "-1"}, {"QC_CPU_REQUEST_MILLICORES": "0.25"},
	} {
		if err := tuneRuntime(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
