package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotMoving reports a Redis Cluster answer that a slot is moving between
// masters, or was moved: MOVED and ASK (the slot, or the keys asked for,
// are served by another node), TRYAGAIN (a multi-key script whose keys are
// split between the two nodes mid-migration) and CLUSTERDOWN Hash slot not
// served (a slot between owners). Redis refused the call before running
// it, so running it again is always safe, and the node that answered is
// healthy: such an error is wrapped with quota.ErrSlotMoving, which the
// circuit breakers do not count (issue 22, item 6).
//
// go-redis's cluster client follows MOVED and ASK itself, up to
// MaxRedirects (3) times, and retries TRYAGAIN on single commands, but not
// inside pipelines (auto-pipelining sends every hot-path call in one) nor
// for the node clients Wait sends to: those errors reach the store.
func slotMoving(err error) bool {
	if err == nil {
		return false // every answer but a failure: no allocation (redis.HasErrorPrefix's errors.As target escapes)
	}
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN Hash slot not served"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// movingBackoff is how long retryMoving waits before each new attempt:
// 510ms in all, about what moving one resource's slot with
// redis-cli --cluster reshard takes.
var movingBackoff = []time.Duration{
	10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond,
	80 * time.Millisecond, 160 * time.Millisecond, 200 * time.Millisecond,
}

// retryMoving runs call, and again after each of movingBackoff's waits
// while it fails because its slot is moving (slotMoving), never past ctx's
// end: it waits only while at least twice the wait is left before ctx's
// deadline, so the last attempt has time to be answered instead of timing
// out (a timeout would count as a failure of a healthy master; seen with
// the 1s compensation calls). It returns the last answer. The cluster client has already learnt
// the new slot map after a MOVED (relearnSlots), so a retry goes to the
// slot's new master; a call that meets a half-moved slot waits for the move
// to end.
func retryMoving(ctx context.Context, call func() (any, error)) (any, error) {
	v, err := call()
	for _, d := range movingBackoff {
		if !slotMoving(err) {
			return v, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*d {
			return v, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		v, err = call()
	}
	return v, err
}
