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
// §5, open findings 2, 3 and D): after a grant it is recomputed (half of
// what the shared pool has free changes with the grant: on main a grant
// answered avail − granted, 0 where the next apply of 100 was granted), on
// a refusal of non-critical work it is what the watermark lets that work
// take (on main the line's capacity, which the watermark then refused), and
// for critical work on a GROWTH or EXPLORE line it is what the watermark
// lets the next critical apply take, after the spare buffer's move (before
// this change the line's capacity, which the watermark refused from halfway
// up: 48 of 110 such probes in a review). Each answer is probed by the
// next apply of its kind on its line: non-critical work asks more than the
// limit with minAmount 1 and must get exactly lineRemaining (or be refused
// when it is 0); critical work and continuations answered 0 must be
// refused even 1, and otherwise in turn: asking exactly lineRemaining, all
// or nothing, is granted; asking one more is refused; asking more than the
// limit with minAmount 1 is granted at most lineRemaining. A probe granted
// is given back (cancelled). Real Redis and miniredis.
func TestLineRemainingIsWhatTheNextApplyGets(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		probes, zero := 0, 0
		// watched: answers to critical work on a GROWTH or EXPLORE line
		// (a watermark refuses it from halfway up).
		watched, watchedZero := 0, 0
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
				core := w.model.Lines[line].Tier == pools.TierCore
				if critical && !cont && !core {
					watched++
					if lr == 0 {
						watchedZero++
					}
				}
				switch {
				case !critical && !cont:
					// Non-critical work asks more than the limit with
					// minAmount 1: it gets exactly lineRemaining, or is
					// refused when that is 0.
					p = apply(id, line, 2*limit, 1, false, false)
					if lr == 0 && p.Outcome == quota.ApplyGranted {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining 0, the next non-critical apply was granted %d",
							seed, step, line, res.Reason, p.Granted)
					}
					if lr > 0 && (p.Outcome != quota.ApplyGranted || p.Granted != lr) {
						t.Fatalf("seed %d step %d: %s %s (granted %d) answered lineRemaining %d, the next non-critical apply got %d (%s)",
							seed, step, line, res.Reason, res.Granted, lr, p.Granted, p.Reason)
					}
				case lr == 0:
					// Critical work or a continuation answered 0: the next
					// such apply, even of 1, is refused.
					p = apply(id, line, 2*limit, 1, critical, cont)
					if p.Outcome == quota.ApplyGranted {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining 0 (critical %v, continuation %v), the next such apply was granted %d",
							seed, step, line, res.Reason, critical, cont, p.Granted)
					}
				case step%3 == 0:
					// Asking exactly lineRemaining, all or nothing, is
					// granted (moving the spare buffer first if need be),
					// watermark or not.
					p = apply(id, line, lr, 0, critical, cont)
					if p.Outcome != quota.ApplyGranted {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining %d (critical %v, continuation %v), asking that much was refused %s",
							seed, step, line, res.Reason, lr, critical, cont, p.Reason)
					}
				case step%3 == 1:
					// One more, all or nothing, is refused: it is the most.
					p = apply(id, line, lr+1, 0, critical, cont)
					if p.Outcome == quota.ApplyGranted {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining %d (critical %v, continuation %v), asking one more was granted",
							seed, step, line, res.Reason, lr, critical, cont)
					}
				default:
					// More than the limit with minAmount 1 is granted, at
					// most lineRemaining (less when what the line has now
					// suffices: the spare buffer moves only for an apply
					// that would be refused).
					p = apply(id, line, 2*limit, 1, critical, cont)
					if p.Outcome != quota.ApplyGranted || p.Granted > lr {
						t.Fatalf("seed %d step %d: %s %s answered lineRemaining %d (critical %v, continuation %v), the next such apply got %d (%s)",
							seed, step, line, res.Reason, lr, critical, cont, p.Granted, p.Reason)
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
		t.Logf("%d probes, %d after lineRemaining 0; %d of critical work on GROWTH or EXPLORE lines, %d of them 0", probes, zero, watched, watchedZero)
		if watchedZero == 0 {
			t.Fatal("no critical work on a GROWTH or EXPLORE line was answered 0: the watermark's part is untested")
		}
	})
}
