package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// scriptHook records the SHA1 of every script a client runs (EVALSHA's
// argument, or the body of an EVAL).
type scriptHook struct {
	mu   sync.Mutex
	shas []string
}

func (h *scriptHook) note(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	body, _ := args[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
	case "eval":
		sum := sha1.Sum([]byte(body))
		body = hex.EncodeToString(sum[:])
	default:
		return
	}
	h.mu.Lock()
	h.shas = append(h.shas, body)
	h.mu.Unlock()
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.note(c)
		}
		return next(ctx, cmds)
	}
}

// A plain apply and a pooled one (on a line, and on a resource with
// grants but no lines) run the one apply.lua, with the same ARGV layout:
// a plain resource is one with no lines, its grant taken whole from the
// limit (the base) and its session keeping no split.
func TestPlainAndPooledAppliesRunTheOneApplyScript(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		plain := *e
		plain.res = newResource(t, e.rdb)
		plain.seed(t, w.per, 10_000, quota.PeriodTotals{})

		hook := &scriptHook{}
		rdb := e.sameClient(t)
		rdb.AddHook(hook)
		s := New(rdb)

		pc := plain.cmd("p1", 300, 0, w.per)
		pr, err := s.Apply(ctxT(t), pc)
		if err != nil || pr.Outcome != quota.ApplyGranted || pr.Granted != 300 || pr.Remaining != 9_700 || pr.Drawn != (quota.PoolSplit{Base: 300}) {
			t.Fatalf("plain apply: %+v %v", pr, err)
		}
		lc := e.cmd("l1", 300, 0, w.per)
		lc.Pools = &quota.PoolsCmd{Line: w.names[0], Critical: true}
		lr, err := s.Apply(ctxT(t), lc)
		if err != nil || lr.Outcome != quota.ApplyGranted || lr.Granted != 300 || lr.Drawn.Dedicated != 300 || lr.Remaining != 9_700 {
			t.Fatalf("pooled apply: %+v %v", lr, err)
		}
		if len(hook.shas) < 2 {
			t.Fatalf("%d scripts run, want at least the two applies", len(hook.shas))
		}
		for _, sha := range hook.shas {
			if sha != applyScript.Hash() {
				t.Fatalf("ran script %s, want apply.lua's %s only", sha, applyScript.Hash())
			}
		}
		if ps, ls := plain.session(t, "p1"), e.session(t, "l1"); ps["dd"] != "" || ps["line"] != "" || ls["dd"] != "300" || ls["line"] != w.names[0] {
			t.Fatalf("plain session %v, pooled %v: want the split only with pools", ps, ls)
		}
		// The plain resource again, now with pools but no lines (as with a
		// temporary grant): the same remaining, and the split says base.
		if _, _, err := plain.s.SetPoolLayout(ctxT(t), plain.res, pools.Layout{}, &pools.Moves{}); err != nil {
			t.Fatal(err)
		}
		if ok, err := plain.s.SeedPools(ctxT(t), plain.res, w.per, pools.Totals{}); err != nil || !ok {
			t.Fatalf("SeedPools: %v %v", ok, err)
		}
		gc := plain.cmd("p2", 200, 0, w.per)
		gc.Pools = &quota.PoolsCmd{NoGrants: true}
		gr, err := s.Apply(ctxT(t), gc)
		if err != nil || gr.Outcome != quota.ApplyGranted || gr.Remaining != 9_500 || gr.Drawn != (quota.PoolSplit{Base: 200}) {
			t.Fatalf("apply with pools, no lines: %+v %v", gr, err)
		}
	})
}
