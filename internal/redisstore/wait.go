package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wait makes state-changing script calls wait for replicas (Redis WAIT)
// before they are answered. Redis replicates asynchronously: without it, a
// master that dies right after answering can take the last changes with it
// when its replica is promoted (docs/reliability.md, "Redis failover").
//
// After the scripts of a pipeline (or a lone call), WAIT Replicas Timeout
// is sent on the same connection, to the master that ran them (on a
// cluster, the master of the resource's slot), so its answer covers every
// one of them. A call whose WAIT counted fewer replicas within Timeout is
// answered all the same (its change is on the master) and counted with
// OnShort: WAIT never makes Redis refuse service when a replica is down.
type Wait struct {
	Replicas int           // 0: do not wait
	Timeout  time.Duration // the longest wait (default 100ms)
	// OnShort, when set, is told how many calls were answered with fewer
	// than Replicas acknowledgements. It must not block.
	OnShort func(calls int)
}

func (w Wait) on() bool { return w.Replicas > 0 }

// WithWait sets w on s (and on its auto-pipelining) and returns s. Call it
// before s is used.
func (s *Store) WithWait(w Wait) *Store {
	if w.Timeout <= 0 {
		w.Timeout = 100 * time.Millisecond
	}
	s.wait = w
	if s.pipe != nil {
		s.pipe.wait = w
	}
	return s
}

// run runs a state-changing script like script.Run, followed by WAIT when
// s.wait is on, and then calls the OnChange hook.
// A call refused because its slot is moving is sent again (retryMoving).
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	defer s.changed(script, keys[0])
	return retryMoving(ctx, func() (any, error) { return s.runOnce(ctx, script, keys, args...) })
}

func (s *Store) runOnce(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if !s.wait.on() {
		v, err := script.Run(ctx, s.rdb, keys, args...).Result()
		if err != nil {
			relearnSlots(ctx, s.rdb, err)
		}
		return v, err
	}
	c := &scriptCall{ctx: ctx, script: script, keys: keys, args: args}
	execGrouped(ctx, s.rdb, []*scriptCall{c}, s.wait)
	return c.val, c.err
}

// read runs a script that changes nothing (no WAIT needed).
// A call refused because its slot is moving is sent again (retryMoving).
func (s *Store) read(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	return retryMoving(ctx, func() (any, error) {
		v, err := script.Run(ctx, s.rdb, keys, args...).Result()
		if err != nil {
			relearnSlots(ctx, s.rdb, err)
		}
		return v, err
	})
}

// masterFor returns a client whose pipelines run on one connection to the
// master holding key: rdb itself for one server (or a Sentinel-managed
// master), the slot's master on a cluster.
func masterFor(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, error) {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("redis WAIT: client %T is neither one server nor a cluster", rdb)
}

// execGrouped runs calls grouped by the master of their first key, one
// pipeline with a trailing WAIT per master, the masters at once, and
// answers every call.
func execGrouped(ctx context.Context, rdb redis.UniversalClient, calls []*scriptCall, w Wait) {
	groups := map[redis.UniversalClient][]*scriptCall{}
	for _, c := range calls {
		m, err := masterFor(ctx, rdb, c.keys[0])
		if err != nil {
			c.err = err
			continue
		}
		groups[m] = append(groups[m], c)
	}
	var wg sync.WaitGroup
	for m, g := range groups {
		wg.Go(func() { exec(ctx, m, g, w) })
	}
	wg.Wait()
	for _, c := range calls {
		if c.err != nil {
			relearnSlots(ctx, rdb, c.err)
			break
		}
	}
}

// relearnSlots has a cluster client load the slot map again after err,
// unless the script itself raised it. go-redis does not reload it after a
// pipeline fails to reach a dead master (nor can it, for the node clients
// WAIT uses), so without this a failover is never noticed: every call goes
// on to the dead address (seen in TestFailoverWithoutWaitLosesWholeCallsOnly).
func relearnSlots(ctx context.Context, rdb redis.UniversalClient, err error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok && !isScriptError(err) {
		cc.ReloadState(ctx)
	}
}

// isScriptError reports an error the script itself raised (a bug or bad
// data), as opposed to one of the connection or the cluster.
func isScriptError(err error) bool {
	return redis.HasErrorPrefix(err, "ERR") && !redis.HasErrorPrefix(err, "ERR Error compiling")
}

// exec sends calls in one pipeline on rdb (EVALSHA each, then WAIT when w
// is on) and fills in their answers. Calls whose script Redis does not have
// (NOSCRIPT: a restart, a failover, SCRIPT FLUSH) go again with EVAL in a
// second pipeline, which loads the script for the calls after them.
func exec(ctx context.Context, rdb redis.UniversalClient, calls []*scriptCall, w Wait) {
	send := func(calls []*scriptCall, eval bool) ([]*redis.Cmd, *redis.IntCmd) {
		cmds := make([]*redis.Cmd, len(calls))
		var wait *redis.IntCmd
		_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, c := range calls {
				if eval {
					cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
				} else {
					cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
				}
			}
			if w.on() {
				wait = redis.NewIntCmd(ctx, "wait", w.Replicas, w.Timeout.Milliseconds())
				_ = pipe.Process(ctx, wait)
			}
			return nil
		})
		return cmds, wait
	}
	cmds, wait := send(calls, false)
	var again []*scriptCall
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, c)
			continue
		}
		c.val, c.err = cmds[i].Result()
	}
	waited := []*redis.IntCmd{wait}
	if len(again) > 0 {
		cmds, wait2 := send(again, true)
		for i, c := range again {
			c.val, c.err = cmds[i].Result()
		}
		waited = append(waited, wait2)
	}
	if !w.on() || w.OnShort == nil {
		return
	}
	// A call counts as short when the WAIT after it saw fewer replicas (a
	// batch of applies as its applies).
	short := 0
	for i, wc := range waited {
		if wc == nil {
			continue
		}
		if n, err := wc.Result(); err != nil || n < int64(w.Replicas) {
			if i == 0 {
				short += weight(calls) - weight(again)
			} else {
				short += weight(again)
			}
		}
	}
	if short > 0 {
		w.OnShort(short)
	}
}

// weight is how many callers' calls calls are: 1 each, and an answered
// apply_batch.lua call the applies it decided (those it left undecided
// are sent again alone and counted there).
func weight(calls []*scriptCall) int {
	n := 0
	for _, c := range calls {
		n += c.callers()
	}
	return n
}

// callers is how many callers' calls c is (see weight).
func (c *scriptCall) callers() int {
	if c.weight == 0 {
		return 1
	}
	vals, ok := c.val.([]any)
	if c.err != nil || !ok {
		return c.weight
	}
	n := 0
	for _, v := range vals {
		if u, undecided := v.(int64); !undecided || u != 0 {
			n++
		}
	}
	return n
}
