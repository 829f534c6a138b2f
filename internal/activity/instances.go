package activity

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstancesKey is the Redis sorted set of the instances that publish
// changes: member = an instance's random token (one per Tracker), score =
// its heartbeat, a number that grows at every heartbeat (its clock in Unix
// ms, or one more than its last score when that clock did not move; Run
// writes it every second and removes it on a clean stop). The scores of
// different instances are never compared with each other nor with a
// reader's clock: a reader takes an instance for dead when its score has
// not moved for InstanceDeadAfter of the reader's own clock, so clocks
// apart by any amount change nothing. A dead instance died (or lost Redis)
// with up to a second of changes it may not have published: a reader that
// finds it so treats every resource as changed, once per such instance
// and score, as it does when the log was lost. With this, a change the
// log holds is seen at the next read, and the full-visit bound
// (DefaultFullVisit) is left for what nothing detects: clocks apart by
// more than ClockSkew, a change made past Tracker.Mutated.
const InstancesKey = "qc:{active}:instances"

// InstanceDeadAfter is how long, on a reader's clock, an instance's
// heartbeat may stay the same before the reader takes it for dead (ten
// missed heartbeats: a stall of that length costs one visit of every
// resource, nothing more). A reader reading less often than that sees a
// death at its second read after it.
const InstanceDeadAfter = 10 * time.Second

// peer is what a reader knows of another instance's heartbeat: its score
// at the last read, since when (the reader's clock, Unix ms) it has had
// it, and whether it was reported dead already.
type peer struct {
	score, since int64
	dead         bool
}

// heartbeat writes this instance's heartbeat in InstancesKey: a score
// above its last one, whatever its clock did.
func (t *Tracker) heartbeat(ctx context.Context) error {
	t.mu.Lock()
	t.beat = max(t.now().UnixMilli(), t.beat+1)
	score := t.beat
	t.mu.Unlock()
	return t.rdb.ZAdd(ctx, InstancesKey, redis.Z{Score: float64(score), Member: t.token}).Err()
}

// leave removes this instance from InstancesKey (a clean stop, after its
// last Flush: nothing of it is unpublished).
func (t *Tracker) leave(ctx context.Context) error {
	return t.rdb.ZRem(ctx, InstancesKey, t.token).Err()
}

// queueInstances queues, in a read of the change log, the read of every
// instance's heartbeat (a few members: one per running instance, and the
// dead ones until trimInstances drops them).
func queueInstances(ctx context.Context, p redis.Pipeliner) *redis.ZSliceCmd {
	return p.ZRangeWithScores(ctx, InstancesKey, 0, -1)
}

// noteInstances takes the heartbeats read at now (this reader's clock,
// Unix ms): an instance whose score has not changed for InstanceDeadAfter
// of this clock, and was not reported dead with it yet, makes the log
// count as lost from now. An instance gone from the set (a clean leave,
// trimmed) is forgotten; this instance's own heartbeat is ignored (stalled,
// it publishes what it has when it resumes). It reports whether the log
// was found lost. t.mu must be held.
func (t *Tracker) noteInstances(all []redis.Z, now int64) bool {
	lost := false
	seen := make(map[string]peer, len(all))
	for _, z := range all {
		tok, _ := z.Member.(string)
		if tok == t.token {
			continue
		}
		score := int64(z.Score)
		p, ok := t.peers[tok]
		switch {
		case !ok || p.score != score:
			p = peer{score: score, since: now}
		case !p.dead && now-p.since >= InstanceDeadAfter.Milliseconds():
			p.dead, lost = true, true
		}
		seen[tok] = p
	}
	t.peers = seen
	if lost {
		t.resetAt = max(t.resetAt, now)
	}
	return lost
}

// trimScript removes the member ARGV[1] of KEYS[1] when its score is still
// ARGV[2] (an instance that came back meanwhile stays).
var trimScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0`)

// trimInstances drops from InstancesKey the instances whose heartbeat this
// reader has seen unchanged for longer than the window, on its own clock
// (every reader read the log since, and a visit that old is due anyway).
// An instance this reader never read is left to the others. Errors:
// Redis's (retried at the next Trim).
func (t *Tracker) trimInstances(ctx context.Context) error {
	cut := t.now().Add(-t.window).UnixMilli()
	var old []redis.Z
	t.mu.Lock()
	for tok, p := range t.peers {
		if p.since < cut {
			old = append(old, redis.Z{Member: tok, Score: float64(p.score)})
		}
	}
	t.mu.Unlock()
	for _, z := range old {
		if err := trimScript.Run(ctx, t.rdb, []string{InstancesKey}, z.Member, int64(z.Score)).Err(); err != nil {
			return err
		}
	}
	return nil
}
