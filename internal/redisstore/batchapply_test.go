package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// batchHook counts the apply_batch.lua calls and the applies they carry.
type batchHook struct {
	mu          sync.Mutex
	batches, in int
	others      int
}

func (h *batchHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			a := c.Args()
			if c.Name() != "evalsha" && c.Name() != "eval" {
				continue
			}
			// (A batch Redis answered NOSCRIPT goes again as EVAL, not counted.)
			if sha, _ := a[1].(string); c.Name() == "evalsha" && (sha == applyBatchScript.Hash() || sha == applyBatchHashScript.Hash()) {
				h.batches++
				keys, _ := strconv.Atoi(fmt.Sprint(a[2]))
				h.in += (keys - 3) / 2
			} else {
				h.others++
			}
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestApplyBatchDecidesAsApplyCallsInTurn sends random pipelines of applies
// (new sessions with partial and refused grants, sessions that exist —
// replays and conflicts —, the same session twice in one pipeline, leases
// and clients that differ) through the pipeliner with batching on, for one
// resource, and the same applies as apply.lua calls one at a time for a
// twin resource, in the order the batch decides them (new sessions in the
// pipeline's order, then the second applies of a session, then those whose
// session existed before: apply_batch.lua leaves them to apply.lua), and
// demands the same answers, the same balance, sessions and lease index
// after every pipeline (times taken relative to each apply's clock), and
// the decisions of pools.Model; in both session forms, on real Redis and
// miniredis, with a limit near 2^53 too.
func TestApplyBatchDecidesAsApplyCallsInTurn(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		outcomes := map[string]int{}
		for seed := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, 31))
			resA, resB := newResource(t, e.rdb), newResource(t, e.rdb)
			limit := int64(200 + rng.IntN(20_000))
			if seed == 5 {
				limit = quota.MaxAmount - int64(rng.IntN(1000))
			}
			model := plainModel(t, limit)
			per := e.current(t)
			st := New(e.rdb)
			st.HashSessions = seed%2 == 1
			for _, r := range []string{resA, resB} {
				if _, err := st.Seed(ctxT(t), r, per, limit, quota.PeriodTotals{}, nil, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			hook := &batchHook{}
			rdbA := e.sameClient(t)
			rdbA.AddHook(hook)
			// The scripts loaded first: a call Redis answers NOSCRIPT goes again
			// after the pipeline's others (exec), which would change the order
			// this test expects (both orders are valid ones of concurrent
			// applies; TestBatchedAppliesAfterAScriptFlush checks that path).
			for _, sc := range []*redis.Script{applyScript, applyHashScript, applyBatchScript, applyBatchHashScript} {
				if err := sc.Load(ctxT(t), rdbA).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var batched, undecided int // what OnBatch was told
			p := newPipeliner(rdbA, Pipelining{MaxCalls: 128, Timeout: 5 * time.Second, BatchApplies: true,
				OnBatch: func(a, u int) { batched, undecided = batched+a, undecided+u }})
			sent := map[string]quota.ApplyCmd{} // id -> first apply (resource A's form)
			var ids []string
			for round := range 25 {
				var cmds []quota.ApplyCmd
				var newIDs, again, existed []int // B's order: new, repeated in the round, existing before
				seen := map[string]bool{}
				k := 2 + rng.IntN(12)
				for j := 0; j < k; j++ {
					var c quota.ApplyCmd
					switch x := rng.IntN(10); {
					case x == 0 && len(ids) > 0: // a session that exists: a replay, or a conflict
						c = sent[ids[rng.IntN(len(ids))]]
						if rng.IntN(3) == 0 {
							c.Amount++
						}
					case x == 1 && len(cmds) > 0: // the same session twice in one pipeline
						c = cmds[rng.IntN(len(cmds))]
					default:
						id := fmt.Sprintf("s%d-%d-%d", seed, round, j)
						amount := 1 + rng.Int64N(limit/10+1)
						c = quota.ApplyCmd{ResourceName: resA, SessionID: id, ClientID: fmt.Sprintf("c%d", rng.IntN(3)),
							Amount: amount, MinAmount: rng.Int64N(2) * (1 + rng.Int64N(amount)), Period: per,
							Lease: time.Duration(1+rng.IntN(3)) * time.Minute}
						c.OtherSessionID = quota.ScopedSessionID(resA, c.ClientID, id)
					}
					c.Attempt = fmt.Sprintf("att-%d-%d-%d", seed, round, j)
					switch _, before := sent[c.SessionID]; {
					case seen[c.SessionID]:
						again = append(again, j)
					case before:
						existed = append(existed, j)
					default:
						newIDs = append(newIDs, j)
					}
					seen[c.SessionID] = true
					cmds = append(cmds, c)
				}
				if len(newIDs) < MinBatch {
					continue
				}
				// Resource A: one pipeline, batched.
				calls := make([]*scriptCall, len(cmds))
				for j, c := range cmds {
					script, keys, args := st.applyCall(c)
					calls[j] = &scriptCall{ctx: ctxT(t), script: script, keys: keys, args: args, done: make(chan struct{})}
				}
				before, b0, u0 := hook.batches, batched, undecided
				p.send(calls)
				if hook.batches != before+1 {
					t.Fatalf("round %d: %d apply_batch.lua calls for %d new sessions, want 1", round, hook.batches-before, len(newIDs))
				}
				// The batch carries each session's first apply and leaves those
				// whose session existed to apply.lua.
				if batched-b0 != len(newIDs)+len(existed) || undecided-u0 != len(existed) {
					t.Fatalf("round %d: OnBatch told %d applies, %d undecided; want %d, %d", round,
						batched-b0, undecided-u0, len(newIDs)+len(existed), len(existed))
				}
				// Resource B: apply.lua, one call at a time, in the batch's order.
				order := slices.Concat(newIDs, again, existed)
				for _, j := range order {
					ca := cmds[j]
					cb := ca
					cb.ResourceName = resB
					cb.OtherSessionID = quota.ScopedSessionID(resB, ca.ClientID, ca.SessionID)
					gotA, errA := calls[j].val, calls[j].err
					ra, errA2 := quota.ApplyResult{}, errA
					if errA == nil {
						ra, errA2 = st.applyResult(gotA, ca)
					}
					rb, errB := st.Apply(ctxT(t), cb)
					if !errors.Is(errA2, quota.ErrSessionConflict) || !errors.Is(errB, quota.ErrSessionConflict) {
						if errA2 != nil || errB != nil {
							t.Fatalf("round %d: apply %s: batched %v, alone %v", round, ca.SessionID, errA2, errB)
						}
					} else {
						outcomes["conflict"]++
						continue
					}
					if na, nb := relative(ra), relative(rb); !reflect.DeepEqual(na, nb) {
						t.Fatalf("round %d: apply %s (%d, min %d): batched %+v, alone %+v", round, ca.SessionID, ca.Amount, ca.MinAmount, ra, rb)
					}
					want, err := model.Apply(pools.ApplyReq{SessionID: ca.SessionID, Amount: ca.Amount, Min: ca.MinAmount, Now: per.Start.UnixMilli()})
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case ra.Outcome == quota.ApplyReplayed:
						outcomes["replayed"]++
					case want.Reason != "":
						if ra.Outcome != quota.ApplyExhausted {
							t.Fatalf("round %d: apply %s: %+v, the model refused (%s)", round, ca.SessionID, ra, want.Reason)
						}
						outcomes["refused"]++
					case ra.Outcome != quota.ApplyGranted || ra.Granted != want.Granted:
						t.Fatalf("round %d: apply %s: %+v, the model granted %d", round, ca.SessionID, ra, want.Granted)
					case ra.Granted < ca.Amount:
						outcomes["partial"]++
					default:
						outcomes["granted"]++
					}
					if _, ok := sent[ca.SessionID]; !ok && ra.Outcome == quota.ApplyGranted {
						sent[ca.SessionID] = ca
						ids = append(ids, ca.SessionID)
					}
				}
				sameState(t, e.rdb, resA, resB, per)
			}
			p.stop()
			if hook.in <= hook.batches {
				t.Fatalf("seed %d: %d batches carried %d applies", seed, hook.batches, hook.in)
			}
			outcomes["batched"] += hook.in
		}
		for _, o := range []string{"granted", "partial", "refused", "replayed", "conflict", "batched"} {
			if outcomes[o] == 0 {
				t.Errorf("no apply ended %s: %v", o, outcomes)
			}
		}
	})
}

// relative is r with its times taken relative to its clock: the lease's
// length and the start's distance from now (a replay's are the first
// apply's), the rest as it is.
func relative(r quota.ApplyResult) quota.ApplyResult {
	if !r.StartTime.IsZero() {
		r.LeaseExpiresAt = time.UnixMilli(int64(r.LeaseExpiresAt.Sub(r.StartTime) / time.Millisecond))
		r.StartTime = time.Time{}
	}
	r.Now = time.Time{}
	return r
}

// sameState fails unless resources a and b hold the same balance of per,
// the same sessions (their fields, the start and lease taken relative to
// the start, scoped ids to their resource) and the same lease index.
func sameState(t *testing.T, rdb redis.UniversalClient, a, b string, per quota.Period) {
	t.Helper()
	ctx := ctxT(t)
	state := func(r string) map[string]string {
		out := map[string]string{}
		bal, err := rdb.HGetAll(ctx, balanceKey(r, per.ID())).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range bal {
			if f != "ep" {
				out["balance "+f] = v
			}
		}
		keys, err := scanKeys(ctx, rdb, prefix(r)+"s:*")
		if err != nil {
			t.Fatal(err)
		}
		starts := map[string]int64{}
		for _, k := range keys {
			h, err := rdb.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			h = unpackSession(maps.Clone(h))
			id := k[len(prefix(r)+"s:"):]
			start, _ := strconv.ParseInt(h["start"], 10, 64)
			lease, _ := strconv.ParseInt(h["lease"], 10, 64)
			starts[id] = start
			h["lease"] = strconv.FormatInt(lease-start, 10)
			delete(h, "start")
			delete(h, "bep")
			for f, v := range h {
				out["session "+id+" "+f] = v
			}
		}
		z, err := rdb.ZRangeWithScores(ctx, leasesKey(r), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range z {
			id := m.Member.(string)
			out["lease "+id] = strconv.FormatInt(int64(m.Score)-starts[id], 10)
		}
		return out
	}
	sa, sb := state(a), state(b)
	if !maps.Equal(sa, sb) {
		for k, v := range sa {
			if sb[k] != v {
				t.Errorf("%s: batched %q, alone %q", k, v, sb[k])
			}
		}
		for k, v := range sb {
			if _, ok := sa[k]; !ok {
				t.Errorf("%s: batched none, alone %q", k, v)
			}
		}
		t.FailNow()
	}
}
