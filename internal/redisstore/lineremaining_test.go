package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// TestLineRemainingIsWhatTheNextApplyGets holds an apply's lineRemaining
// to what the line's next apply of the same kind is granted (docs/pools.md
// §5, open findings 2 and 3): after a grant it is recomputed (half of what
// the shared pool has free changes with the grant: on main a grant answered
// avail − granted, 0 where the next apply of 100 was granted), and on a
// refusal of non-critical work it is what the watermark lets that work take
// (on main the line's capacity, which the watermark then refused). Each
// answer is probed by the next apply on its line: non-critical work asks
// more than the limit with minAmount 1 and must get exactly lineRemaining
// (or be refused when it is 0); critical work and continuations ask exactly
// lineRemaining, all or nothing, and must get it (critical work on a GROWTH
// or EXPLORE line may still be refused by the watermark); a probe
// granted is given back (cancelled). Real Redis and miniredis.
func TestLineRemainingIsWhatTheNextApplyGets(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		probes, zero := 0, 0
		for seed := range uint64(3) {
			if seed > 0 {
				e.res = newResource(t, e.rdb)
			}
			rng := rand.New(rand.NewPCG(seed, 21))
			limit := int64(2000 + rng.IntN(20_000))
			s := pools.DefaultSettings()
			s.BorrowLimitPercent = []int64{0, 50, 300}[rng.IntN(3)]
			w := newPoolWorld(t, e, limit, s, pools.LineNames(4))
			apply := func(id, line string, amount, min int64, critical, cont bool) quota.ApplyResult {
				c := e.cmd(id, amount, min, w.per)
				c.Pools = &quota.PoolsCmd{Line: line, Critical: critical, Continuation: cont, NoGrants: true}
				res, err := e.s.Apply(ctxT(t), c)
				if err != nil {
					t.Fatalf("apply %s: %v", id, err)
				}
				return res
			}
			for step := range 120 {
				line := w.names[rng.IntN(len(w.names))]
				critical, cont := rng.IntN(3) == 0, rng.IntN(6) == 0
				res := apply(fmt.Sprintf("a%d-%d", seed, step), line, 1+rng.Int64N(limit/15), 0, critical, cont)
				lr := res.LineRemaining
				id := fmt.Sprintf("p%d-%d", seed, step)
				var p quota.ApplyResult
				if !critical && !cont {
					p = apply(id, line, 2*limit, 1, false, false)
					if lr == 0 && p.Outcome == quota.ApplyGranted {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining 0, the next non-critical apply was granted %d",
							seed, step, line, res.Reason, p.Granted)
					}
					if lr > 0 && (p.Outcome != quota.ApplyGranted || p.Granted != lr) {
						t.Fatalf("seed %d step %d: %s %s (granted %d) answered lineRemaining %d, the next non-critical apply got %d (%s)",
							seed, step, line, res.Reason, res.Granted, lr, p.Granted, p.Reason)
					}
				} else if lr > 0 {
					p = apply(id, line, lr, 0, critical, cont)
					// Critical work is answered the line's capacity: on a
					// GROWTH or EXPLORE line its watermark may still refuse it.
					core := w.model.Lines[line].Tier == pools.TierCore
					if p.Outcome != quota.ApplyGranted && (cont || core || p.Reason != pools.ReasonWatermark) {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining %d (critical %v, continuation %v), asking that much was refused %s",
							seed, step, line, res.Reason, lr, critical, cont, p.Reason)
					}
				}
				if p.Outcome == quota.ApplyGranted {
					// The probe gives its grant back (cancel.lua), so that
					// the lines fill at the pace of the applies.
					if err := e.s.Cancel(ctxT(t), e.res, id); err != nil {
						t.Fatal(err)
					}
				}
				probes++
				if lr == 0 {
					zero++
				}
			}
		}
		t.Logf("%d probes, %d after lineRemaining 0", probes, zero)
	})
}
