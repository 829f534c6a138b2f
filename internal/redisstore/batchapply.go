package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Batched applies (issue 23 §3): the applies of one pipeline that would
// each take apply.lua's fast path (a new session on a plain resource, with
// a scoped id and an attempt: nearly every POST /quota/apply) and share a
// resource's period are sent as one call of apply_batch.lua, which decides
// them in turn as that many apply.lua calls would. On one hot resource,
// Redis's CPU per apply is its ceiling, and most of it was the fixed cost of
// a script call and of each redis.call inside it (the clock, the limit, the
// balance, the existence check, the reservation, the lease index), which
// a batch pays once; only the session's own write is per apply
// (docs/performance.md, "Batched applies").
//
// What a batch leaves undecided (apply_batch.lua's 0: the period not open
// or not seeded, the session exists, reserved past 2^53) goes to apply.lua
// on its own in a second pipeline, which decides it from scratch: the same
// answer as if it had been sent alone, one round trip later.

// MinBatch is the fewest fast-path applies of one resource's period in a
// pipeline that are sent as one apply_batch.lua call; fewer go as apply.lua
// calls each.
const MinBatch = 2

// applyBatchScripts are apply_batch.lua for the packed session record and,
// as applyHashScript, for the full one (Store.HashSessions).
var (
	applyBatchScript     = load("apply_batch.lua")
	applyBatchHashScript = redis.NewScript(sourceWith("apply_batch.lua", map[string]string{"fast_session.lib": "fast_session_hash.lib"}))
)

// batchOf is the batch script of an apply call's script, nil when the call
// cannot be batched: another script, or an apply that does not take the
// fast path (with pools, or without a scoped id or an attempt; Store.Apply
// sends 10 arguments for a plain resource).
func batchOf(c *scriptCall) *redis.Script {
	var bs *redis.Script
	switch c.script {
	case applyScript:
		bs = applyBatchScript
	case applyHashScript:
		bs = applyBatchHashScript
	default:
		return nil
	}
	if len(c.keys) != 5 || len(c.args) != 10 || c.args[8] == "" || c.args[9] == "" {
		return nil
	}
	return bs
}

// batchKey is what the applies of one batch share: the script, the
// resource's limit, balance and leases keys, and the period's end and
// first-period flag (Store.Apply's keys 0, 1, 3 and arguments 3, 4, 7).
type batchKey struct {
	script                *redis.Script
	limit, balance, lease string
	start, end, first     any
}

// applyBatch is one apply_batch.lua call and the apply calls it answers.
type applyBatch struct {
	call    *scriptCall
	members []*scriptCall
}

// has says whether one of the batch's applies already uses session key k.
func (b *applyBatch) has(k string) bool {
	for _, m := range b.members {
		if m.keys[2] == k || m.keys[4] == k {
			return true
		}
	}
	return false
}

// batchApplies returns the calls to send for calls: each batch of at least
// MinBatch fast-path applies of one resource's period as one apply_batch.lua
// call, in the place of its first apply, and every other call as it came,
// in its order (an apply of a session key a batch already holds stays on
// its own, after that batch). batches are the batched calls, for answer.
func batchApplies(calls []*scriptCall) (wire []*scriptCall, batches []*applyBatch) {
	var groups map[batchKey]*applyBatch
	n := 0
	for _, c := range calls {
		bs := batchOf(c)
		if bs == nil {
			continue
		}
		k := batchKey{bs, c.keys[0], c.keys[1], c.keys[3], c.args[3], c.args[4], c.args[7]}
		if groups == nil {
			groups = map[batchKey]*applyBatch{}
		}
		g := groups[k]
		if g == nil {
			g = &applyBatch{}
			groups[k] = g
		}
		if g.has(c.keys[2]) || g.has(c.keys[4]) {
			continue
		}
		g.members = append(g.members, c)
		n++
	}
	if n < MinBatch {
		return calls, nil
	}
	wire = make([]*scriptCall, 0, len(calls))
	for _, c := range calls {
		bs := batchOf(c)
		if bs == nil {
			wire = append(wire, c)
			continue
		}
		g := groups[batchKey{bs, c.keys[0], c.keys[1], c.keys[3], c.args[3], c.args[4], c.args[7]}]
		switch {
		case len(g.members) < MinBatch || !g.in(c):
			wire = append(wire, c)
		case g.members[0] == c:
			g.call = g.build(bs)
			wire = append(wire, g.call)
			batches = append(batches, g)
		}
	}
	return wire, batches
}

// in says whether c is one of the batch's applies.
func (b *applyBatch) in(c *scriptCall) bool {
	for _, m := range b.members {
		if m == c {
			return true
		}
	}
	return false
}

// build makes the batch's apply_batch.lua call (its keys and arguments,
// from each apply's as Store.Apply sends them).
func (b *applyBatch) build(bs *redis.Script) *scriptCall {
	first := b.members[0]
	keys := make([]string, 0, 3+2*len(b.members))
	keys = append(keys, first.keys[0], first.keys[1], first.keys[3])
	args := make([]any, 0, 3+6*len(b.members))
	args = append(args, first.args[3], first.args[4], first.args[7])
	for _, m := range b.members {
		keys = append(keys, m.keys[2], m.keys[4])
		// amount, minAmount, clientId, lease ms, sessionId, attempt
		args = append(args, m.args[0], m.args[1], m.args[2], m.args[5], m.args[6], m.args[8])
	}
	return &scriptCall{ctx: context.Background(), script: bs, keys: keys, args: args, weight: len(b.members)}
}

// answer gives each of the batch's applies its answer from the batch
// call's, and returns again with the applies the batch left undecided
// appended. A batch call that failed fails each of its applies with its
// error, as a pipeline does (the script may have run: see
// Pipelining.Timeout).
func (b *applyBatch) answer(again []*scriptCall) []*scriptCall {
	if b.call.err != nil {
		for _, m := range b.members {
			m.err = b.call.err
		}
		return again
	}
	vals, ok := b.call.val.([]any)
	if !ok || len(vals) != len(b.members) {
		err := fmt.Errorf("apply_batch.lua: %T of %d answers for %d applies", b.call.val, len(vals), len(b.members))
		for _, m := range b.members {
			m.err = err
		}
		return again
	}
	for i, m := range b.members {
		if v, undecided := vals[i].(int64); undecided && v == 0 {
			again = append(again, m)
			continue
		}
		m.val = vals[i]
	}
	return again
}
