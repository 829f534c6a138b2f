package activity

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Key is the Redis sorted set of active resources: member = resource name,
// score = the Unix time in ms until which it counts as active. The hash tag
// keeps it one key on a Redis Cluster.
const Key = "qc:{active}:resources"

// DefaultWindow is how long a resource stays active after its last use or
// change when Options.Window is not set.
const DefaultWindow = 15 * time.Minute

// Options configure a Tracker.
type Options struct {
	// Window: a resource is active until Window after its last Touch, or
	// until the lease it was given ran out, whichever is later (default
	// DefaultWindow).
	Window time.Duration
	Log    *zap.Logger      // nil: no logs
	Now    func() time.Time // default time.Now
}

// Tracker is the set of active resources; safe for concurrent use.
type Tracker struct {
	rdb    redis.UniversalClient
	window time.Duration
	log    *zap.Logger
	now    func() time.Time

	mu      sync.Mutex
	until   map[string]int64 // this instance's touches: resource → active until, Unix ms
	written map[string]int64 // what Redis was last told of a resource by this instance
	remote  []string         // the last set read from Redis
	remoteT int64            // when it was read, Unix ms (0: never)
}

// New returns a tracker on rdb (the Redis the instances share).
func New(rdb redis.UniversalClient, o Options) *Tracker {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{rdb: rdb, window: o.Window, log: o.Log, now: o.Now,
		until: map[string]int64{}, written: map[string]int64{}}
}

// Window is the tracker's window.
func (t *Tracker) Window() time.Duration { return t.window }

// Touch records that resource was used or changed now. leaseEnd, when not
// zero, is when a lease it granted runs out: the resource stays active at
// least until then plus the window, so that a session whose holder died is
// still swept. It costs no Redis command (Run writes it).
func (t *Tracker) Touch(resource string, leaseEnd time.Time) {
	now := t.now()
	u := now.Add(t.window).UnixMilli()
	if !leaseEnd.IsZero() {
		u = max(u, leaseEnd.Add(t.window).UnixMilli())
	}
	t.mu.Lock()
	if u > t.until[resource] {
		t.until[resource] = u
	}
	t.mu.Unlock()
}

// Flush writes the touches Redis does not know yet, in one ZADD GT (a
// score only ever moves forward), and drops the local touches that ran out.
// A resource is written again only once its "active until" moved by more
// than a tenth of the window. Errors: Redis's; what was not written is
// written by the next Flush.
func (t *Tracker) Flush(ctx context.Context) error {
	now := t.now().UnixMilli()
	step := t.window.Milliseconds() / 10
	var zs []redis.Z
	t.mu.Lock()
	for r, u := range t.until {
		if u <= now {
			delete(t.until, r)
			delete(t.written, r)
			continue
		}
		if u-t.written[r] > step {
			zs = append(zs, redis.Z{Score: float64(u), Member: r})
		}
	}
	t.mu.Unlock()
	if len(zs) == 0 {
		return nil
	}
	if err := t.rdb.ZAddGT(ctx, Key, zs...).Err(); err != nil {
		return err
	}
	t.mu.Lock()
	for _, z := range zs {
		r := z.Member.(string)
		t.written[r] = max(t.written[r], int64(z.Score))
	}
	t.mu.Unlock()
	return nil
}

// Trim removes the resources whose "active until" passed from Redis.
func (t *Tracker) Trim(ctx context.Context) error {
	return t.rdb.ZRemRangeByScore(ctx, Key, "-inf", strconv.FormatInt(t.now().UnixMilli(), 10)).Err()
}

// Active returns the active resources, sorted: those Redis holds as active
// now (every instance's) and this instance's touches not written yet. It
// reads Redis at most once per second (a second call within it answers the
// last set read). When Redis cannot be read it answers the last set read
// with the local touches, and the error.
func (t *Tracker) Active(ctx context.Context) ([]string, error) {
	now := t.now().UnixMilli()
	t.mu.Lock()
	fresh := t.remoteT != 0 && now-t.remoteT < 1000
	t.mu.Unlock()
	var err error
	if !fresh {
		var rs []string
		rs, err = t.rdb.ZRangeByScore(ctx, Key, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
		if err == nil {
			t.mu.Lock()
			t.remote, t.remoteT = rs, now
			t.mu.Unlock()
		}
	}
	t.mu.Lock()
	out := slices.Clone(t.remote)
	for r, u := range t.until {
		if u > now {
			out = append(out, r)
		}
	}
	t.mu.Unlock()
	slices.Sort(out)
	return slices.Compact(out), err
}

// Run flushes every second and trims every minute until ctx ends; it
// returns nil then. Failures are logged at debug and retried at the next
// tick (a Redis outage shows in the backends' own alerts).
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastTrim := time.Time{}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = t.Flush(fctx) // what this instance touched last
			cancel()
			return nil
		case <-tick.C:
		}
		if err := t.Flush(ctx); err != nil && ctx.Err() == nil {
			t.log.Debug("active resources not written (retried next second)", zap.Error(err))
		}
		if time.Since(lastTrim) >= time.Minute {
			lastTrim = time.Now()
			if err := t.Trim(ctx); err != nil && ctx.Err() == nil {
				t.log.Debug("active resources not trimmed (retried next minute)", zap.Error(err))
			}
		}
	}
}
