package activity

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstancesKey is the Redis sorted set of the instances that publish
// changes: member = an instance's random token (one per Tracker), score =
// its last heartbeat, Unix ms on its clock (Run writes it every second and
// removes it on a clean stop). An instance whose heartbeat is older than
// InstanceDeadAfter died (or lost Redis) with up to a second of changes it
// may not have published: a reader that finds it so treats every resource
// as changed, once per such instance, as it does when the log was lost.
// With this, a change the log holds is seen at the next read, and the
// full-visit bound (DefaultFullVisit) is left for what nothing detects:
// clocks apart by more than ClockSkew, a change made past Tracker.Mutated.
const InstancesKey = "qc:{active}:instances"

// InstanceDeadAfter is how old an instance's heartbeat may be before the
// readers take it for dead (ten missed heartbeats: a stall of that length
// costs one visit of every resource, nothing more).
const InstanceDeadAfter = 10 * time.Second

// heartbeat writes this instance's heartbeat in InstancesKey.
func (t *Tracker) heartbeat(ctx context.Context) error {
	return t.rdb.ZAdd(ctx, InstancesKey, redis.Z{Score: float64(t.now().UnixMilli()), Member: t.token}).Err()
}

// leave removes this instance from InstancesKey (a clean stop, after its
// last Flush: nothing of it is unpublished).
func (t *Tracker) leave(ctx context.Context) error {
	return t.rdb.ZRem(ctx, InstancesKey, t.token).Err()
}

// queueDead queues, in a read of the change log, the read of the instances
// whose heartbeat is older than InstanceDeadAfter at now.
func queueDead(ctx context.Context, p redis.Pipeliner, now int64) *redis.ZSliceCmd {
	return p.ZRangeByScoreWithScores(ctx, InstancesKey, &redis.ZRangeBy{
		Min: "-inf", Max: "(" + strconv.FormatInt(now-InstanceDeadAfter.Milliseconds(), 10)})
}

// noteDead takes the dead instances read at now: one not seen dead before
// (or seen with another heartbeat) makes the log count as lost from now.
// It reports whether one did. t.mu must be held.
func (t *Tracker) noteDead(dead []redis.Z, now int64) bool {
	lost := false
	seen := make(map[string]int64, len(dead))
	for _, z := range dead {
		tok, _ := z.Member.(string)
		if tok == t.token {
			continue // this instance, stalled: it publishes what it has when it resumes
		}
		at := int64(z.Score)
		seen[tok] = at
		if t.dead[tok] != at {
			lost = true
		}
	}
	t.dead = seen
	if lost {
		t.resetAt = max(t.resetAt, now)
	}
	return lost
}

// trimInstances drops the instances dead for longer than the window (every
// reader read the log since, and a visit that old is due anyway).
func (t *Tracker) trimInstances(ctx context.Context) error {
	cut := t.now().Add(-t.window).UnixMilli()
	return t.rdb.ZRemRangeByScore(ctx, InstancesKey, "-inf", "("+strconv.FormatInt(cut, 10)).Err()
}
