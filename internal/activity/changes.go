package activity

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ChangedKey is the Redis sorted set of the resources whose balance
// changed: member = resource name, score = the Unix time in ms at which
// the instance that changed it published the change (its clock at the
// Flush that wrote it, never earlier than the change itself). EpochKey
// holds a random token set once (SET NX): when it is gone or different
// (Redis restarted empty, or its data were replaced), the change log may
// have lost entries and every reader treats every resource as changed.
const (
	ChangedKey = "qc:{active}:changed"
	EpochKey   = "qc:{active}:epoch"
)

// ClockSkew is how far apart the instances' clocks may be (and how late a
// change published just before a visit may show): a resource whose change
// was published up to ClockSkew before a visit started is visited once
// more. A larger skew is caught by Visits' periodic full visit.
const ClockSkew = 2 * time.Second

// changeReadEvery is how often the change log is read from Redis at most:
// the loops that ask within it share one read.
const changeReadEvery = time.Second

// Mutated records that resource's balance (or anything of it in Redis:
// sessions, leases, the limit, pools) changed now. It costs no Redis
// command: Flush publishes it in ChangedKey with one ZADD for every change
// of the last second. redisstore.Store calls it after each state-changing
// script (Store.OnChange).
func (t *Tracker) Mutated(resource string) {
	now := t.now().UnixMilli()
	t.mu.Lock()
	t.pending[resource] = now
	t.local[resource] = now
	t.mu.Unlock()
}

// Reset makes every resource count as changed now, on this instance: the
// failover watcher calls it when a Redis master was replaced or restarted
// (changes published on it just before may be lost).
func (t *Tracker) Reset() {
	now := t.now().UnixMilli()
	t.mu.Lock()
	t.resetAt = now + 1 // a visit that started in this very ms may have been before the failover
	t.mu.Unlock()
}

// flushChanges publishes the changes recorded since the last Flush, scored
// with this instance's clock now. What was not written is written by the
// next Flush.
func (t *Tracker) flushChanges(ctx context.Context) error {
	now := t.now().UnixMilli()
	t.mu.Lock()
	if len(t.pending) == 0 {
		t.mu.Unlock()
		return nil
	}
	zs := make([]redis.Z, 0, len(t.pending))
	sent := make(map[string]int64, len(t.pending))
	for r, at := range t.pending {
		zs = append(zs, redis.Z{Score: float64(now), Member: r})
		sent[r] = at
	}
	t.mu.Unlock()
	if err := t.rdb.ZAddGT(ctx, ChangedKey, zs...).Err(); err != nil {
		return err
	}
	t.mu.Lock()
	for r, at := range sent {
		if t.pending[r] == at { // not changed again meanwhile
			delete(t.pending, r)
		}
	}
	t.mu.Unlock()
	return nil
}

// trimChanges drops the changes older than the window (a visit older than
// that is due anyway: Visits' full visit is shorter than any window).
func (t *Tracker) trimChanges(ctx context.Context) error {
	cut := t.now().Add(-t.window).UnixMilli()
	t.mu.Lock()
	for _, m := range []map[string]int64{t.changes, t.local} {
		for r, at := range m {
			if at < cut {
				delete(m, r)
			}
		}
	}
	t.mu.Unlock()
	return t.rdb.ZRemRangeByScore(ctx, ChangedKey, "-inf", strconv.FormatInt(cut, 10)).Err()
}

// readChanges reads the changes published since the last read (less
// ClockSkew), the epoch and the instances' heartbeats (InstancesKey), at most
// once per changeReadEvery: one MULTI of four commands on the {active}
// slot, whatever the number of resources. A different epoch than the last
// read's, or an instance newly found dead (its heartbeat unchanged for
// InstanceDeadAfter of this clock), sets resetAt. Errors: Redis's
// (the caller then treats every resource as changed).
func (t *Tracker) readChanges(ctx context.Context) error {
	// One read at a time: concurrent callers (the scrape's workers) wait
	// for it and share it rather than each sending their own.
	t.readMu.Lock()
	defer t.readMu.Unlock()
	now := t.now().UnixMilli()
	t.mu.Lock()
	if t.chReadT != 0 && now-t.chReadT < changeReadEvery.Milliseconds() {
		t.mu.Unlock()
		return nil
	}
	from := now - t.window.Milliseconds()
	if t.chReadT != 0 {
		from = max(from, t.chReadT-ClockSkew.Milliseconds())
	}
	t.mu.Unlock()
	var get *redis.StringCmd
	var rng, inst *redis.ZSliceCmd
	_, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, EpochKey, newToken(), 0) // a fresh token each time: a lost key comes back different
		get = p.Get(ctx, EpochKey)
		rng = p.ZRangeByScoreWithScores(ctx, ChangedKey, &redis.ZRangeBy{Min: strconv.FormatInt(from, 10), Max: "+inf"})
		inst = queueInstances(ctx, p)
		return nil
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ep := get.Val(); ep != t.epoch {
		if t.epoch != "" {
			// The log was lost: what it held is unknown. The visits of
			// the caller's Due start after this read (at now).
			t.resetAt = max(t.resetAt, now)
		}
		t.epoch = ep
	}
	t.noteInstances(inst.Val(), now)
	for _, z := range rng.Val() {
		r, _ := z.Member.(string)
		if at := int64(z.Score); at > t.changes[r] {
			t.changes[r] = at
		}
	}
	t.chReadT = now
	return nil
}

// newToken is a random epoch token.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// changedSince reports whether resource changed at or after at (Unix ms,
// this instance's clock): on this instance, or published by any instance
// at or after at less ClockSkew; or the change log was found lost after
// at. t.mu must be held.
func (t *Tracker) changedSince(resource string, at int64) bool {
	return t.resetAt > at || t.local[resource] >= at || t.changes[resource] >= at-ClockSkew.Milliseconds()
}
