package redisstore

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// This file holds the reads of the operators' surface (internal/admin): the
// live session map from the lease index, burn-rate samples and the shared
// key that signs admin cursors. None runs a script: each is plain reads,
// or writes of keys no script reads.

func burnKey(r string) string { return prefix(r) + "burn" }

// SecretKey is the Redis key of the deployment's shared secret of the given
// name (e.g. the admin cursor signing key).
func SecretKey(name string) string { return "qc:secret:" + name }

// LiveSessions walks the lease index of resource (qc:{r}:leases, the USING
// sessions by lease expiry) from the latest lease down, starting at after,
// and returns up to count sessions with their state, the position after the
// last one, and whether entries may remain. Its cost is one ZREVRANGEBYSCORE
// of count entries (plus the ties at after.LeaseMs it skips) and one
// pipelined HMGET per session. A session that left the index between the
// two reads (finished or swept just now) is left out. Errors: one wrapping
// quota.ErrUnavailable when Redis cannot be reached.
func (s *Store) LiveSessions(ctx context.Context, resource string, after quota.LivePos, count int) ([]quota.LiveSession, quota.LivePos, bool, error) {
	maxScore := "+inf"
	if after != (quota.LivePos{}) {
		maxScore = strconv.FormatInt(after.LeaseMs, 10)
	}
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, leasesKey(resource), &redis.ZRangeBy{
		Max: maxScore, Min: "-inf", Offset: int64(after.Skip), Count: int64(count),
	}).Result()
	if err != nil {
		return nil, after, false, wrap("live sessions", err)
	}
	next := after
	ids := make([]string, len(zs))
	pos := make([]quota.LivePos, len(zs))
	for i, z := range zs {
		ids[i], _ = z.Member.(string)
		lease := int64(z.Score)
		if lease == next.LeaseMs && next != (quota.LivePos{}) {
			next.Skip++
		} else {
			next = quota.LivePos{LeaseMs: lease, Skip: 1}
		}
		pos[i] = next
	}
	states, err := s.Sessions(ctx, resource, ids)
	if err != nil {
		return nil, after, false, err
	}
	out := make([]quota.LiveSession, 0, len(zs))
	for i, id := range ids {
		st, ok := states[id]
		if !ok || st.Status != quota.StatusUsing {
			continue
		}
		out = append(out, quota.LiveSession{
			SessionID: id, ClientID: st.ClientID, Granted: st.Granted, PeriodStart: st.PeriodStart,
			StartTime: st.StartTime, LeaseExpiresAt: ms(int64(zs[i].Score)), FailOpen: st.FailOpen,
			BusinessLine: st.BusinessLine, Pos: pos[i],
		})
	}
	return out, next, len(zs) == count, nil
}

// LiveCount is the number of USING sessions of resource (the lease index's
// size). Errors: one wrapping quota.ErrUnavailable.
func (s *Store) LiveCount(ctx context.Context, resource string) (int64, error) {
	n, err := s.rdb.ZCard(ctx, leasesKey(resource)).Result()
	return n, wrap("live count", err)
}

// RecordBurn adds a consumption sample of resource to qc:{r}:burn (a sorted
// set by sample time): one ZADD. At most once per burnTrimEvery (4
// minutes) of sample time per resource and instance the same pipeline also
// drops the samples older than keep and sets the set's TTL to keep plus
// burnTrimEvery plus a minute: a set may hold up to burnTrimEvery of
// samples older than keep, which BurnSamples (read from a time within
// keep) never returns. The set is small: one
// sample per sampling interval per instance within keep. Before, each
// sample was a MULTI of ZADD, ZREMRANGEBYSCORE and PEXPIRE (5 commands;
// issue 23 §1). Errors: one wrapping quota.ErrUnavailable.
func (s *Store) RecordBurn(ctx context.Context, resource string, smp quota.BurnSample, keep time.Duration) error {
	at := smp.At.UnixMilli()
	member := fmt.Sprintf("%d:%d:%d", at, smp.PeriodStart.UnixMilli(), smp.Consumed)
	trim := s.burns.due(resource, at)
	var err error
	if !trim {
		err = s.rdb.ZAdd(ctx, burnKey(resource), redis.Z{Score: float64(at), Member: member}).Err()
	} else {
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, burnKey(resource), redis.Z{Score: float64(at), Member: member})
			p.ZRemRangeByScore(ctx, burnKey(resource), "-inf", "("+strconv.FormatInt(at-keep.Milliseconds(), 10))
			p.PExpire(ctx, burnKey(resource), keep+burnTrimEvery+time.Minute)
			return nil
		})
	}
	if err != nil {
		s.burns.forget(resource) // trim (and set the TTL) on the next sample
	}
	return wrap("record burn", err)
}

// burnTrimEvery is how often, in sample time, RecordBurn trims a resource's
// samples and sets their TTL. The TTL's extra (burnTrimEvery plus a
// minute) is above it: a set whose TTL was last set a burnTrimEvery ago
// still outlives its newest sample by keep, and a set that expired (its
// resource unsampled that long) is trimmed, so given a TTL, by its first
// new sample. It was 50 s, when a quiet resource was sampled once a
// minute: each of its samples then also sent the trim and the TTL (2 of
// its 4 commands a minute; issue 23 §1, the quiet phase of
// scripts/bench-many-policies.sh). A few more old samples are kept instead
// (a sample per instance per 10 s at most: ≤ 24 per resource and instance).
const burnTrimEvery = 4 * time.Minute

// burnTrims remembers when RecordBurn last trimmed each resource (sample
// time, ms); safe for concurrent use. Entries of resources no longer
// sampled are dropped once a burnTrimEvery.
type burnTrims struct {
	mu    sync.Mutex
	last  map[string]int64
	swept int64
}

// due says whether a sample at ms of resource is to trim, and records it.
func (b *burnTrims) due(resource string, ms int64) bool {
	every := burnTrimEvery.Milliseconds()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[string]int64{}
	}
	if ms-b.swept >= every {
		for r, t := range b.last {
			if ms-t >= every {
				delete(b.last, r) // its next sample trims anyway
			}
		}
		b.swept = ms
	}
	if t, ok := b.last[resource]; ok && ms-t < every && ms >= t {
		return false
	}
	b.last[resource] = ms
	return true
}

// forget makes resource's next sample trim.
func (b *burnTrims) forget(resource string) {
	b.mu.Lock()
	delete(b.last, resource)
	b.mu.Unlock()
}

// BurnSamples returns the samples of resource taken at or after since,
// oldest first. Errors: one wrapping quota.ErrUnavailable.
func (s *Store) BurnSamples(ctx context.Context, resource string, since time.Time) ([]quota.BurnSample, error) {
	vals, err := s.rdb.ZRangeByScore(ctx, burnKey(resource), &redis.ZRangeBy{
		Min: strconv.FormatInt(since.UnixMilli(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, wrap("burn samples", err)
	}
	return decodeBurnSamples(vals)
}

// decodeBurnSamples decodes the members of a burn-sample set
// ("at:period:consumed", milliseconds and an amount).
func decodeBurnSamples(vals []string) ([]quota.BurnSample, error) {
	out := make([]quota.BurnSample, 0, len(vals))
	for _, v := range vals {
		parts := strings.Split(v, ":")
		if len(parts) != 3 {
			return nil, fmt.Errorf("burn sample %q: want at:period:consumed", v)
		}
		var n [3]int64
		for i, p := range parts {
			var err error
			if n[i], err = strconv.ParseInt(p, 10, 64); err != nil {
				return nil, fmt.Errorf("burn sample %q: %w", v, err)
			}
		}
		out = append(out, quota.BurnSample{At: ms(n[0]), PeriodStart: time.UnixMilli(n[1]).UTC(), Consumed: n[2]})
	}
	return out, nil
}

// SharedSecret returns the deployment's secret of the given name, creating
// it (size random bytes) if no instance has yet: every instance gets the
// same bytes, so a cursor signed by one verifies on another. Errors: one
// wrapping quota.ErrUnavailable.
func (s *Store) SharedSecret(ctx context.Context, name string, size int) ([]byte, error) {
	fresh := make([]byte, size)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := s.rdb.SetNX(ctx, SecretKey(name), fresh, 0).Result(); err != nil {
		return nil, wrap("shared secret", err)
	}
	v, err := s.rdb.Get(ctx, SecretKey(name)).Bytes()
	if err != nil {
		return nil, wrap("shared secret", err)
	}
	if len(v) < 16 {
		return nil, fmt.Errorf("shared secret %s: %d bytes in Redis, want at least 16", name, len(v))
	}
	return v, nil
}
