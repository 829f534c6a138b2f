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

// MaxBatch is the most applies in one apply_batch.lua call; a pipeline's
// applies of one period past it go in further batches. The script hands
// every session key to one EXISTS and every lease to one ZADD through Lua's
// unpack, whose results are bounded by the Lua stack (~8,000 on Redis 7.0,
// ~5,100 in miniredis's gopher-lua): 256 applies are 512 keys and 512
// ZADD arguments, far below either.
const MaxBatch = 256

// batchKey is what the applies of one batch share: the script, the
// resource's limit, balance and leases keys, and the period's end and
// first-period flag (Store.Apply's keys 0, 1, 3 and arguments 3, 4, 7).
type batchKey struct {
	script                *redis.Script
	limit, balance, lease string
	start, end, first     any
}

// applyGroup is the fast-path applies of one batchKey in a pipeline, each
// with a session key none of the others uses.
type applyGroup struct {
	members []*scriptCall
	keys    map[string]struct{} // the members' session keys, once there are more than a few
}

// has says whether one of the group's applies already uses session key k.
func (g *applyGroup) has(k string) bool {
	if g.keys != nil {
		_, ok := g.keys[k]
		return ok
	}
	for _, m := range g.members {
		if m.keys[2] == k || m.keys[4] == k {
			return true
		}
	}
	return false
}

// add makes c one of the group's applies.
func (g *applyGroup) add(c *scriptCall) {
	g.members = append(g.members, c)
	if g.keys == nil && len(g.members) > 16 {
		// Past a few, a set: the scan would grow with the square of a
		// pipeline's applies (QC_REDIS_PIPELINE_MAX_CALLS may be 10,000).
		g.keys = make(map[string]struct{}, 2*len(g.members))
		for _, m := range g.members {
			g.keys[m.keys[2]], g.keys[m.keys[4]] = struct{}{}, struct{}{}
		}
	} else if g.keys != nil {
		g.keys[c.keys[2]], g.keys[c.keys[4]] = struct{}{}, struct{}{}
	}
}

// applyBatch is one apply_batch.lua call and the apply calls it answers.
type applyBatch struct {
	call    *scriptCall
	members []*scriptCall
}

// batchApplies returns the calls to send for calls: the fast-path applies
// of one resource's period, MinBatch to MaxBatch at a time, as one
// apply_batch.lua call each, in the place of the batch's first apply, and
// every other call as it came, in its order (an apply of a session key
// another apply of the pipeline already uses stays on its own, after the
// batch of that one). batches are the batched calls, for answer.
func batchApplies(calls []*scriptCall) (wire []*scriptCall, batches []*applyBatch) {
	var groups map[batchKey]*applyGroup
	n := 0
	for _, c := range calls {
		bs := batchOf(c)
		if bs == nil {
			continue
		}
		k := batchKey{bs, c.keys[0], c.keys[1], c.keys[3], c.args[3], c.args[4], c.args[7]}
		if groups == nil {
			groups = map[batchKey]*applyGroup{}
		}
		g := groups[k]
		if g == nil {
			g = &applyGroup{}
			groups[k] = g
		}
		if g.has(c.keys[2]) || g.has(c.keys[4]) {
			continue
		}
		g.add(c)
		n++
	}
	if n < MinBatch {
		return calls, nil
	}
	// Each group's applies in batches of at most MaxBatch, in their order;
	// a last batch of fewer than MinBatch goes as apply.lua calls.
	for k, g := range groups {
		for i := 0; i < len(g.members); i += MaxBatch {
			part := g.members[i:min(i+MaxBatch, len(g.members))]
			if len(part) < MinBatch {
				break
			}
			b := &applyBatch{members: part}
			for _, m := range part {
				m.batch = b
			}
			b.call = b.build(k.script)
		}
	}
	wire = make([]*scriptCall, 0, len(calls))
	for _, c := range calls {
		switch b := c.batch; {
		case b == nil:
			wire = append(wire, c)
		case b.members[0] == c:
			wire = append(wire, b.call)
			batches = append(batches, b)
		}
	}
	return wire, batches
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
// appended; answered is false when no apply was answered by the batch: a
// batch call that failed fails each of its applies with its error, as a
// pipeline does (the script may have run: see Pipelining.Timeout), and so
// does one whose reply does not hold one answer per apply.
func (b *applyBatch) answer(again []*scriptCall) (_ []*scriptCall, answered bool) {
	if b.call.err != nil {
		for _, m := range b.members {
			m.err = b.call.err
		}
		return again, false
	}
	vals, ok := b.call.val.([]any)
	if !ok || len(vals) != len(b.members) {
		err := fmt.Errorf("apply_batch.lua: %T of %d answers for %d applies", b.call.val, len(vals), len(b.members))
		for _, m := range b.members {
			m.err = err
		}
		return again, false
	}
	for i, m := range b.members {
		if v, undecided := vals[i].(int64); undecided && v == 0 {
			again = append(again, m)
			continue
		}
		m.val = vals[i]
	}
	return again, true
}
