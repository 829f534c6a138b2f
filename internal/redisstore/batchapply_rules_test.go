package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The rules of batched applies around the script (batchapply.go): which
// applies are batched, how a batch's answer reaches each caller, the size
// bound, WAIT's count, a caller that gave up. batchapply_test.go holds the
// script's decisions against apply.lua and the model.

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
	again, answered := b.answer(nil)
	if !answered || len(again) != 1 || again[0] != b.members[1] || b.members[0].val == nil || b.members[2].val == nil ||
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
		if again, answered := b.answer(nil); answered || len(again) != 0 {
			t.Fatalf("%s: answered %v, %d sent again", name, answered, len(again))
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
