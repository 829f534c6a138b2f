package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// TestPlainApplyMatchesTheModel drives random applies (new sessions with
// and without a scoped id and an attempt, replays), finishes past and below
// the grant, and give-backs through apply.lua on a plain resource (no pools:
// ARGV[11] absent; the fast path with a scoped id and an attempt and its
// short answer, the general path without) and through pools.Model on a
// layout without lines or grants, and demands the same decisions (granted,
// refused, what a replay answers: the first answer's lease and start too)
// and the same balance after every step, on real Redis and miniredis; a
// grant's answer is whole whichever path made it (lease = now + the lease
// asked, start = now, the period's start, all drawn from the base). Limits
// near 2^53 are included.
func TestPlainApplyMatchesTheModel(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		outcomes := map[string]int{}
		for seed := range uint64(4) {
			if seed > 0 {
				e.res = newResource(t, e.rdb)
			}
			rng := rand.New(rand.NewPCG(seed, 29))
			limit := int64(1000 + rng.IntN(100_000))
			if seed == 3 {
				limit = quota.MaxAmount - int64(rng.IntN(1000))
			}
			model := plainModel(t, limit)
			per := e.current(t)
			e.seed(t, per, limit, quota.PeriodTotals{})
			// New sessions are written in both forms (scripts/session_record.lib),
			// by a Store that packs them and one that does not, as during a
			// rolling upgrade; every later step reads either.
			full := New(e.rdb)
			full.HashSessions = true
			cmds := map[string]quota.ApplyCmd{}     // sent, by session id
			first := map[string]quota.ApplyResult{} // answered, by session id
			var open []string                       // granted, not finished
			for step := range 200 {
				switch op := rng.IntN(10); {
				case op >= 8 && len(open) > 0:
					i := rng.IntN(len(open))
					id := open[i]
					open = append(open[:i], open[i+1:]...)
					if rng.IntN(2) == 0 {
						granted := model.Sessions[id].Granted
						actual := rng.Int64N(granted*3/2 + 1)
						if _, err := model.Finish(id, actual); err != nil {
							t.Fatal(err)
						}
						got, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: id, Actual: actual, Retention: time.Hour})
						if err != nil || got.Charged != actual {
							t.Fatalf("step %d: finish %s: %+v %v", step, id, got, err)
						}
						outcomes["finished"]++
					} else {
						model.Cancel(id)
						if err := e.s.Cancel(ctxT(t), e.res, id); err != nil {
							t.Fatalf("step %d: cancel %s: %v", step, id, err)
						}
						delete(cmds, id)
						outcomes["cancelled"]++
					}
				case op >= 6 && len(open) > 0:
					// A replay: the first answer, nothing reserved again.
					id := open[rng.IntN(len(open))]
					c := cmds[id]
					c.Attempt = fmt.Sprintf("retry-%d", step)
					got, err := e.s.Apply(ctxT(t), c)
					if err != nil || got.Outcome != quota.ApplyReplayed || got.Granted != model.Sessions[id].Granted ||
						!got.LeaseExpiresAt.Equal(first[id].LeaseExpiresAt) || !got.StartTime.Equal(first[id].StartTime) ||
						got.Drawn != first[id].Drawn {
						t.Fatalf("step %d: replay %s: %+v %v, model granted %d, first answer %+v", step, id, got, err, model.Sessions[id].Granted, first[id])
					}
					outcomes["replayed"]++
				default:
					id := fmt.Sprintf("s%d-%d", seed, step)
					amount := 1 + rng.Int64N(limit/8+1)
					if seed == 3 {
						amount = 1 + rng.Int64N(limit/3)
					}
					minAmount := rng.Int64N(2) * (1 + rng.Int64N(amount))
					c := e.cmd(id, amount, minAmount, per)
					if rng.IntN(2) == 0 {
						c.OtherSessionID = quota.ScopedSessionID(e.res, c.ClientID, id)
					}
					if rng.IntN(3) > 0 {
						c.Attempt = fmt.Sprintf("att-%d", step)
					}
					want, err := model.Apply(pools.ApplyReq{SessionID: id, Amount: amount, Min: minAmount, Now: per.Start.UnixMilli()})
					if err != nil {
						t.Fatal(err)
					}
					st, packed := e.s, c.OtherSessionID != "" && c.Attempt != "" // the fast path's new session
					if rng.IntN(2) == 0 {
						st, packed = full, false
					}
					got, err := st.Apply(ctxT(t), c)
					if err != nil {
						t.Fatalf("step %d: apply %s: %v", step, id, err)
					}
					if want.Reason != "" {
						if got.Outcome != quota.ApplyExhausted || got.Granted != 0 {
							t.Fatalf("step %d: apply %s of %d (min %d): %+v, model refused (%s)", step, id, amount, minAmount, got, want.Reason)
						}
						outcomes["refused"]++
						break
					}
					if got.Outcome != quota.ApplyGranted || got.Granted != want.Granted || got.Drawn != (quota.PoolSplit{Base: want.Granted}) {
						t.Fatalf("step %d: apply %s of %d (min %d): %+v, model granted %d", step, id, amount, minAmount, got, want.Granted)
					}
					if got.Now.IsZero() || !got.StartTime.Equal(got.Now) || !got.LeaseExpiresAt.Equal(got.Now.Add(c.Lease)) ||
						!got.PeriodStart.Equal(per.Start) || got.OtherForm {
						t.Fatalf("step %d: apply %s: %+v, want start = now, lease now + %s, period start %s", step, id, got, c.Lease, per.Start)
					}
					// The record the fast path writes, unless it would pass 64 bytes
					// (fast_session.lib): then the full form.
					rec := fmt.Sprintf("%d|%d|%d|%d|%d|%d", amount, minAmount, got.Granted, got.Remaining,
						got.StartTime.UnixMilli(), per.Start.UnixMilli())
					if packed && len(rec) > 64 {
						outcomes["long record"]++
					}
					packed = packed && len(rec) <= 64
					raw, err := e.rdb.HGetAll(ctxT(t), sessionKey(e.res, id)).Result()
					if r, ok := raw[recordField]; err != nil || ok != packed || (packed && (len(raw) != 6 || r != rec)) || (!packed && raw["granted"] != fmt.Sprint(got.Granted)) {
						t.Fatalf("step %d: apply %s wrote %v (%v), want the packed form %v (record %q)", step, id, raw, err, packed, rec)
					}
					outcomes[map[bool]string{true: "packed", false: "full"}[packed]]++
					first[id] = got
					if b := e.balance(t, per); got.Remaining != b.Remaining() {
						t.Fatalf("step %d: apply %s answered remaining %d, the balance holds %d", step, id, got.Remaining, b.Remaining())
					}
					if want.Granted < amount {
						outcomes["partial"]++
					}
					outcomes["granted"]++
					cmds[id] = c
					open = append(open, id)
				}
				b := e.balance(t, per)
				if b.Limit != limit || b.Charged+b.Reserved != model.BaseUsed {
					t.Fatalf("step %d: balance %+v, model holds %d of %d", step, b, model.BaseUsed, limit)
				}
			}
		}
		for _, o := range []string{"granted", "partial", "refused", "replayed", "finished", "cancelled", "packed", "full", "long record"} {
			if outcomes[o] == 0 {
				t.Errorf("no step ended %s: %v", o, outcomes)
			}
		}
	})
}

// plainModel is pools.Model of a resource without lines or grants.
func plainModel(t *testing.T, limit int64) *pools.Model {
	t.Helper()
	lay, err := pools.Plan(limit, pools.DefaultSettings(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return pools.NewModel(lay, true)
}

// TestFinishPast2To53IsExact settles finishes whose balance is past 2^53
// (an overage takes charged past the limit: finish.lua caps it at 9.0e18,
// not at the limit). finish.lua writes charged and reserved by one HSET of
// values computed in Lua only while every value is below 2^53 (exact as a
// Lua number); past it, by HINCRBY, whose 64-bit arithmetic is exact. The
// raw counters and the session's copies are checked to the unit. A plain
// finish writes no fheld or froom (a replay reads an absent one as the empty string), and
// its replay answers the first finish.
func TestFinishPast2To53IsExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const maxAmt = quota.MaxAmount // 2^53−1
		per := e.current(t)
		e.seed(t, per, maxAmt, quota.PeriodTotals{Charged: maxAmt - 10})
		e.grant(t, e.cmd("a", 4, 0, per), 4)
		e.grant(t, e.cmd("b", 6, 0, per), 6)
		raw := func() map[string]string {
			m, err := e.rdb.HGetAll(ctxT(t), balanceKey(e.res, per.ID())).Result()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		// charged 2^53 − 11 + 1000 = 2^53 + 989: the new value is past 2^53.
		if f := e.finish(t, "a", 1000); f.Charged != 1000 || f.Overage != 996 || f.Replayed {
			t.Fatalf("finish a %+v", f)
		}
		if m := raw(); m["charged"] != "9007199254741981" || m["reserved"] != "6" {
			t.Fatalf("balance after a: %v", m)
		}
		// charged is past 2^53 when read: 9007199254741981 + 3.
		if f := e.finish(t, "b", 3); f.Charged != 3 || f.Refunded != 3 {
			t.Fatalf("finish b %+v", f)
		}
		if m := raw(); m["charged"] != "9007199254741984" || m["reserved"] != "0" {
			t.Fatalf("balance after b: %v", m)
		}
		s := e.session(t, "b")
		if s["fcharged"] != "9007199254741984" || s["freserved"] != "0" || s["flimit"] != "9007199254740991" {
			t.Fatalf("session b %v", s)
		}
		if _, ok := s["fheld"]; ok {
			t.Fatalf("a plain finish wrote fheld: %v", s)
		}
		if _, ok := s["froom"]; ok {
			t.Fatalf("a plain finish wrote froom: %v", s)
		}
		if f := e.finish(t, "b", 3); !f.Replayed || f.Charged != 3 || f.Refunded != 3 || f.Granted != 6 {
			t.Fatalf("replay of b %+v", f)
		}
	})
}
