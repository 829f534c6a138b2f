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
	"sync/atomic"
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

// TestBatchAppliesGroupsFastPathAppliesOfOnePeriod: the applies of one
// resource's period that take apply.lua's fast path (a scoped id and an
// attempt, no pools) go as one apply_batch.lua call in the place of the
// first, in order; applies of another period, resource or session form,
// with pools, without an attempt or a scoped id, another script, and the
// second apply of a session key stay as they came; a group of one is not
// batched.
func TestBatchAppliesGroupsFastPathAppliesOfOnePeriod(t *testing.T) {
	t.Parallel()
	st, hs := New(nil), New(nil)
	hs.HashSessions = true
	per := quota.Period{Start: time.UnixMilli(1_000_000), End: time.UnixMilli(2_000_000)}
	other := quota.Period{Start: per.End, End: per.End.Add(time.Hour)}
	cmd := func(res, id string, p quota.Period) quota.ApplyCmd {
		return quota.ApplyCmd{ResourceName: res, SessionID: id, ClientID: "c", Amount: 5, MinAmount: 1, Period: p,
			Lease: time.Minute, Attempt: "att-" + id, OtherSessionID: quota.ScopedSessionID(res, "c", id)}
	}
	call := func(s *Store, c quota.ApplyCmd) *scriptCall {
		script, keys, args := s.applyCall(c)
		return &scriptCall{script: script, keys: keys, args: args}
	}
	noAttempt := cmd("r", "n1", per)
	noAttempt.Attempt = ""
	noScope := cmd("r", "n2", per)
	noScope.OtherSessionID = ""
	pooled := cmd("r", "n3", per)
	pooled.Pools = &quota.PoolsCmd{Line: "l1"}
	calls := []*scriptCall{
		0:  call(st, cmd("r", "a", per)),
		1:  call(st, cmd("r", "b", other)), // another period: alone
		2:  call(st, noAttempt),
		3:  call(st, cmd("r", "c", per)),
		4:  call(st, cmd("q", "a", per)), // another resource: alone
		5:  call(st, noScope),
		6:  call(st, pooled),
		7:  call(st, cmd("r", "a", per)), // a second apply of a: alone, after the batch
		8:  {script: heartbeatScript, keys: []string{"k"}},
		9:  call(hs, cmd("r", "d", per)), // the full session form: alone
		10: call(st, cmd("r", "e", per)),
	}
	wire, batches := batchApplies(calls)
	if len(batches) != 1 {
		t.Fatalf("%d batches, want 1", len(batches))
	}
	b := batches[0]
	if !slices.Equal(b.members, []*scriptCall{calls[0], calls[3], calls[10]}) || b.call.weight != 3 || b.call.script != applyBatchScript {
		t.Fatalf("batch of %d (weight %d), want calls 0, 3 and 10", len(b.members), b.call.weight)
	}
	want := []*scriptCall{b.call, calls[1], calls[2], calls[4], calls[5], calls[6], calls[7], calls[8], calls[9]}
	if !slices.Equal(wire, want) {
		t.Fatalf("wire = %v, want %v", wire, want)
	}
	wantKeys := []string{limitKey("r"), balanceKey("r", per.ID()), leasesKey("r"),
		sessionKey("r", "a"), sessionKey("r", quota.ScopedSessionID("r", "c", "a")),
		sessionKey("r", "c"), sessionKey("r", quota.ScopedSessionID("r", "c", "c")),
		sessionKey("r", "e"), sessionKey("r", quota.ScopedSessionID("r", "c", "e"))}
	if !slices.Equal(b.call.keys, wantKeys) {
		t.Fatalf("keys = %v, want %v", b.call.keys, wantKeys)
	}
	wantArgs := fmt.Sprint([]any{per.ID(), per.EndMillis(), "0",
		5, 1, "c", 60000, "a", "att-a", 5, 1, "c", 60000, "c", "att-c", 5, 1, "c", 60000, "e", "att-e"})
	if got := fmt.Sprint(b.call.args); got != wantArgs {
		t.Fatalf("args = %s, want %s", got, wantArgs)
	}
	// A group of one: nothing batched, the calls as they came.
	for _, c := range calls {
		c.batch = nil
	}
	if wire, batches := batchApplies(calls[:3]); len(batches) != 0 || !slices.Equal(wire, calls[:3]) {
		t.Fatalf("one apply of a period: %d batches, wire %v", len(batches), wire)
	}
	// Past MaxBatch: batches of MaxBatch in order, a last one of fewer
	// than MinBatch alone; a second apply of a session of the first batch
	// after it, alone.
	many := make([]*scriptCall, 2*MaxBatch+1)
	for i := range many {
		many[i] = call(st, cmd("r", fmt.Sprint("m", i), per))
	}
	many = append(many, call(st, cmd("r", "m0", per)))
	wire, batches = batchApplies(many)
	if len(batches) != 2 || !slices.Equal(batches[0].members, many[:MaxBatch]) || !slices.Equal(batches[1].members, many[MaxBatch:2*MaxBatch]) {
		t.Fatalf("%d batches, want two of %d in order", len(batches), MaxBatch)
	}
	if want := []*scriptCall{batches[0].call, batches[1].call, many[2*MaxBatch], many[2*MaxBatch+1]}; !slices.Equal(wire, want) {
		t.Fatalf("wire of %d calls, want the two batches, then the last apply and the second apply of m0", len(wire))
	}
}

// TestABatchAnswersEachApplyOrFailsThemAll: each apply gets its element of
// the batch's reply, an undecided one (0) goes back to be sent alone; a
// batch call that failed, or whose reply does not hold one answer per
// apply, fails every apply (none is taken as granted).
func TestABatchAnswersEachApplyOrFailsThemAll(t *testing.T) {
	t.Parallel()
	mk := func() *applyBatch {
		return &applyBatch{call: &scriptCall{}, members: []*scriptCall{{}, {}, {}}}
	}
	b := mk()
	b.call.val = []any{[]any{int64(1), int64(5), int64(7), int64(9)}, int64(0), []any{int64(3)}}
	again := b.answer(nil)
	if len(again) != 1 || again[0] != b.members[1] || b.members[0].val == nil || b.members[2].val == nil ||
		b.members[1].val != nil || b.members[0].err != nil {
		t.Fatalf("answered %+v, again %v", b.members, again)
	}
	for name, fail := range map[string]func(b *applyBatch){
		"the call failed":       func(b *applyBatch) { b.call.err = errors.New("EOF") },
		"two answers for three": func(b *applyBatch) { b.call.val = []any{int64(0), int64(0)} },
		"not a list":            func(b *applyBatch) { b.call.val = int64(1) },
	} {
		b := mk()
		fail(b)
		if again := b.answer(nil); len(again) != 0 {
			t.Fatalf("%s: %d sent again", name, len(again))
		}
		for i, m := range b.members {
			if m.err == nil || m.val != nil {
				t.Fatalf("%s: apply %d answered %v, %v; want an error", name, i, m.val, m.err)
			}
		}
	}
}

// TestBatchedAppliesGrantExactlyTheLimit: 200 concurrent applies of 1 with
// scoped ids and attempts (POST /quota/apply's, batched when pipelined)
// against a limit of 100, the scripts flushed from Redis while they run
// (a batch answered NOSCRIPT goes again as EVAL), and each apply sent
// again afterwards (a replay): exactly 100 granted, each once, the balance
// and the lease index holding exactly those.
func TestBatchedAppliesGrantExactlyTheLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		cmd := func(i int) quota.ApplyCmd {
			id := fmt.Sprintf("x%d", i)
			c := e.cmd(id, 1, 0, per)
			c.Attempt, c.OtherSessionID = "att-"+id, quota.ScopedSessionID(e.res, c.ClientID, id)
			return c
		}
		var granted atomic.Int64
		var wg sync.WaitGroup
		for i := range 200 {
			if i == 100 {
				if err := e.rdb.ScriptFlush(ctxT(t)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			wg.Go(func() {
				r, err := e.s.Apply(ctxT(t), cmd(i))
				switch {
				case err != nil:
					t.Errorf("apply %d: %v", i, err)
				case r.Outcome == quota.ApplyGranted && r.Granted == 1:
					granted.Add(1)
				case r.Outcome != quota.ApplyExhausted:
					t.Errorf("apply %d: %+v", i, r)
				}
			})
		}
		wg.Wait()
		if granted.Load() != 100 {
			t.Fatalf("%d granted, want 100", granted.Load())
		}
		wantBalance(t, e.balance(t, per), 100, 0, 100)
		if n, err := e.rdb.ZCard(ctxT(t), leasesKey(e.res)).Result(); err != nil || n != 100 {
			t.Fatalf("lease index holds %d (%v), want 100", n, err)
		}
		var replayed atomic.Int64
		for i := range 200 {
			wg.Go(func() {
				r, err := e.s.Apply(ctxT(t), cmd(i))
				if err == nil && r.Outcome == quota.ApplyReplayed && r.Granted == 1 {
					replayed.Add(1)
				}
			})
		}
		wg.Wait()
		if replayed.Load() != 100 {
			t.Fatalf("%d replayed, want the 100 granted", replayed.Load())
		}
		wantBalance(t, e.balance(t, per), 100, 0, 100)
	})
}

// pipelineCalls makes the scriptCalls of cmds as Store.Apply sends them.
func pipelineCalls(t *testing.T, s *Store, ctx context.Context, cmds ...quota.ApplyCmd) []*scriptCall {
	t.Helper()
	calls := make([]*scriptCall, len(cmds))
	for i, c := range cmds {
		script, keys, args := s.applyCall(c)
		calls[i] = &scriptCall{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	}
	return calls
}

// fastCmd is an apply of e's resource as POST /quota/apply sends it (a
// scoped id and an attempt: apply.lua's fast path, batched).
func (e *env) fastCmd(id string, amount int64, per quota.Period) quota.ApplyCmd {
	c := e.cmd(id, amount, 0, per)
	c.Attempt, c.OtherSessionID = "att-"+id, quota.ScopedSessionID(e.res, c.ClientID, id)
	return c
}

// TestAPipelineOfManyAppliesGoesInBatchesOfMaxBatch: 16 × MaxBatch + 4
// applies of one period in one pipeline (QC_REDIS_PIPELINE_MAX_CALLS may
// be 10,000) go as 17 apply_batch.lua calls, each within what Lua's unpack
// takes (one batch of 4,100 failed on Redis, past ~4,000 applies, and in
// miniredis, past ~2,550, where it could fail after its writes), and are
// each granted once.
func TestAPipelineOfManyAppliesGoesInBatchesOfMaxBatch(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		n := 16*MaxBatch + 4
		per := e.current(t)
		e.seed(t, per, int64(n), quota.PeriodTotals{})
		hook := &batchHook{}
		rdb := e.sameClient(t)
		rdb.AddHook(hook)
		p := newPipeliner(rdb, Pipelining{MaxCalls: 10_000, Timeout: 5 * time.Second, BatchApplies: true})
		defer p.stop()
		cmds := make([]quota.ApplyCmd, n)
		for i := range cmds {
			cmds[i] = e.fastCmd(fmt.Sprintf("m%d", i), 1, per)
		}
		calls := pipelineCalls(t, e.s, ctxT(t), cmds...)
		p.send(calls)
		for i, c := range calls {
			r, err := e.s.applyResult(c.val, cmds[i])
			if c.err != nil || err != nil || r.Outcome != quota.ApplyGranted || r.Granted != 1 {
				t.Fatalf("apply %d: %+v %v %v", i, r, c.err, err)
			}
		}
		if hook.batches != 17 || hook.in != n {
			t.Fatalf("%d batches carrying %d applies, want 17 carrying %d", hook.batches, hook.in, n)
		}
		wantBalance(t, e.balance(t, per), int64(n), 0, int64(n))
		if z, err := e.rdb.ZCard(ctxT(t), leasesKey(e.res)).Result(); err != nil || z != int64(n) {
			t.Fatalf("lease index holds %d (%v), want %d", z, err, n)
		}
	})
}

// withOldSession is a resource on real Redis with a limit of 1000 in its
// current period and one session granted, "old".
func withOldSession(t *testing.T) (*env, quota.Period) {
	t.Parallel()
	e := newEnv(t, "redis")
	per := e.current(t)
	e.seed(t, per, 1000, quota.PeriodTotals{})
	e.grant(t, e.fastCmd("old", 1, per), 1)
	return e, per
}

// TestWaitCountsEachBatchedApplyOnce: with WAIT on and no replica (every
// WAIT short), a pipeline of three applies, one of a session that exists
// (left by the batch to apply.lua, so sent twice): OnShort is told three
// callers, not four.
func TestWaitCountsEachBatchedApplyOnce(t *testing.T) {
	e, per := withOldSession(t)
	var short atomic.Int64
	p := newPipeliner(e.rdb, Pipelining{MaxCalls: 128, Timeout: 5 * time.Second, BatchApplies: true})
	defer p.stop()
	p.wait = Wait{Replicas: 1, Timeout: 5 * time.Millisecond, OnShort: func(n int) { short.Add(int64(n)) }}
	calls := pipelineCalls(t, e.s, ctxT(t), e.fastCmd("a", 1, per), e.fastCmd("old", 1, per), e.fastCmd("b", 1, per))
	p.send(calls)
	for i, c := range calls {
		if c.err != nil {
			t.Fatalf("apply %d: %v", i, c.err)
		}
	}
	if got, err := e.s.applyResult(calls[1].val, e.fastCmd("old", 1, per)); err != nil || got.Outcome != quota.ApplyReplayed {
		t.Fatalf("the apply of the session that exists: %+v %v, want a replay", got, err)
	}
	if short.Load() != 3 {
		t.Fatalf("OnShort told %d for 3 applies", short.Load())
	}
}

// cancelAfterBatch cancels a context once a pipeline holding an
// apply_batch.lua call has been answered.
type cancelAfterBatch struct {
	batchHook
	cancel context.CancelFunc
}

func (h *cancelAfterBatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	count := h.batchHook.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		before := h.batches
		err := count(ctx, cmds)
		if h.batches > before {
			h.cancel()
		}
		return err
	}
}

// TestAnUndecidedApplyWhoseCallerGaveUpIsNotSentAgain: the apply of a
// session that exists, left undecided by its batch, whose caller's context
// ends while the batch is out, is not sent to apply.lua (nothing of it runs:
// the session keeps its attempt, which a replay by another would take off)
// and answers the context's error.
func TestAnUndecidedApplyWhoseCallerGaveUpIsNotSentAgain(t *testing.T) {
	e, per := withOldSession(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	hook := &cancelAfterBatch{cancel: cancel}
	rdb := e.sameClient(t)
	rdb.AddHook(hook)
	if err := applyBatchScript.Load(ctxT(t), rdb).Err(); err != nil { // no NOSCRIPT and EVAL to count
		t.Fatal(err)
	}
	p := newPipeliner(rdb, Pipelining{MaxCalls: 128, Timeout: 5 * time.Second, BatchApplies: true})
	defer p.stop()
	retry := e.fastCmd("old", 1, per)
	retry.Attempt = "another-attempt"
	calls := append(pipelineCalls(t, e.s, ctxT(t), e.fastCmd("a", 1, per)), pipelineCalls(t, e.s, ctx, retry)...)
	calls = append(calls, pipelineCalls(t, e.s, ctxT(t), e.fastCmd("b", 1, per))...)
	p.send(calls)
	if hook.batches != 1 || hook.others != 0 {
		t.Fatalf("%d batches and %d other script calls sent, want the batch alone", hook.batches, hook.others)
	}
	if !errors.Is(calls[1].err, context.Canceled) {
		t.Fatalf("the retry answered %v, %v; want context.Canceled", calls[1].val, calls[1].err)
	}
	if att := e.session(t, "old")["att"]; att != "att-old" {
		t.Fatalf("the session's attempt is %q, want att-old (untouched)", att)
	}
	wantBalance(t, e.balance(t, per), 1000, 0, 3)
}
