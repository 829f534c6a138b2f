package redisstore

import (
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// BenchmarkApplyPlainVersusLines measures, on the real Redis, one apply of
// a plain resource (apply.lua) against one apply of a resource with 12
// business lines (apply.lua, CORE line, watermark checked, no grant),
// interleaved in the same run: the cost bound is lines ≤ 1.2 ×
// plain. Each op is one round trip and one script; ns/op is the client's
// wall time per apply.
//
//	go test -run '^$' -bench ApplyPlainVersusLines -benchtime 5000x ./internal/redisstore/
//
// With QC_BENCH_POOLS_REDIS=host:port (a private server: its statistics are
// reset) it runs there and also reports the server's own time per script
// call (INFO commandstats, evalsha usec_per_call) as redis-us/op, which the
// load of other clients on the machine does not inflate the way it does
// the client's wall time; and the CPU time the server spent per apply
// (INFO cpu, used_cpu_user + used_cpu_sys) as redis-cpu-us/op, which
// counts only the time the server ran, not the time it waited for a CPU
// on a loaded machine. client-cpu-us/op is this process's CPU time per
// apply (getrusage: the client's encoding, decoding and GC).
func BenchmarkApplyPlainVersusLines(b *testing.B) {
	for _, name := range []string{"plain", "lines12", "plain", "lines12"} {
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, "redis")
			if addr := os.Getenv("QC_BENCH_POOLS_REDIS"); addr != "" {
				e.rdb = redis.NewClient(&redis.Options{Addr: addr})
				b.Cleanup(func() { _ = e.rdb.Close() })
				e.s = New(e.rdb)
			}
			per := e.current(b)
			e.seed(b, per, quota.MaxAmount, quota.PeriodTotals{})
			var line string
			if name == "lines12" {
				lay, err := pools.Plan(quota.MaxAmount, pools.DefaultSettings(), pools.LineNames(12))
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := e.s.SetPoolLayout(ctxT(b), e.res, lay, &pools.Moves{}); err != nil {
					b.Fatal(err)
				}
				if _, err := e.s.SeedPools(ctxT(b), e.res, per, pools.Totals{}); err != nil {
					b.Fatal(err)
				}
				line = "core-1"
			}
			ctx := ctxT(b)
			if os.Getenv("QC_BENCH_POOLS_REDIS") != "" {
				if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				cpu0 := serverCPU(b, e)
				b.Cleanup(func() {
					b.ReportMetric(evalshaMicros(b, e), "redis-us/op")
					b.ReportMetric((serverCPU(b, e)-cpu0)*1e6/float64(b.N), "redis-cpu-us/op")
				})
			}
			self0 := selfCPU()
			b.Cleanup(func() { b.ReportMetric((selfCPU()-self0)*1e6/float64(b.N), "client-cpu-us/op") })
			b.ResetTimer()
			for i := range b.N {
				c := quota.ApplyCmd{ResourceName: e.res, SessionID: "b" + strconv.Itoa(i), Amount: 1, Period: per, Lease: time.Minute}
				if line != "" {
					c.Pools = &quota.PoolsCmd{Line: line, Critical: true, NoGrants: true} // as the Service sends it: no grant
				}
				r, err := e.s.Apply(ctx, c)
				if err != nil || r.Outcome != quota.ApplyGranted {
					b.Fatalf("apply %d: %+v %v", i, r, err)
				}
			}
		})
	}
}

var cpuStat = regexp.MustCompile(`used_cpu_(?:user|sys):([0-9.]+)`)

// serverCPU is the server's CPU time so far, in seconds.
func serverCPU(b *testing.B, e *env) float64 {
	info, err := e.rdb.Info(ctxT(b), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, m := range cpuStat.FindAllStringSubmatch(info, 2) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

// selfCPU is this process's CPU time so far (user + system), in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

var evalshaStat = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([0-9.]+)`)

// evalshaMicros reads the server's mean time per EVALSHA since the reset.
func evalshaMicros(b *testing.B, e *env) float64 {
	info, err := e.rdb.Info(ctxT(b), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStat.FindStringSubmatch(info)
	if m == nil {
		b.Fatalf("no evalsha statistics in %q", info)
	}
	v, _ := strconv.ParseFloat(m[3], 64)
	return v
}
