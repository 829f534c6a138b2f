package activity

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Key is the Redis sorted set of active resources (used or changed):
// member = resource name, score = the Unix time in ms until which it counts
// as active. The hash tag keeps it one key on a Redis Cluster. UsedKey is
// the same for the resources used (not only changed).
const (
	Key     = "qc:{active}:resources"
	UsedKey = "qc:{active}:used"
)

// DefaultWindow is how long a resource stays active after its last use or
// change when Options.Window is not set.
const DefaultWindow = 15 * time.Minute

// Options configure a Tracker.
type Options struct {
	// Window: a resource is active until Window after its last Touch or
	// Changed, or until the lease it was given ran out plus Window,
	// whichever is later (default DefaultWindow).
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

	mu        sync.Mutex
	all, used *set
	// The change log (changes.go): pending = changes not published yet
	// (resource → Unix ms), local = this instance's last change of each
	// resource, changes = the last publication read from ChangedKey (any
	// instance's, scored with its clock), chReadT =
	// when ChangedKey was last read, epoch = EpochKey's token then, resetAt
	// = when the log was last found lost (Reset, or a new epoch).
	pending, local, changes map[string]int64
	chReadT, resetAt        int64
	epoch                   string
	readMu                  sync.Mutex // one change-log read at a time
	// token names this instance in InstancesKey, beat = its last
	// heartbeat's score; peers = the other instances' heartbeats at the
	// last read of the log (instances.go).
	token string
	beat  int64
	peers map[string]peer
}

// set is one sorted set and what this instance knows of it.
type set struct {
	key     string
	until   map[string]int64 // this instance's touches: resource → active until, Unix ms
	written map[string]int64 // what Redis was last told of a resource by this instance
	remote  []string         // the last set read from Redis
	remoteT int64            // when it was read, Unix ms (0: never)
}

func newSet(key string) *set {
	return &set{key: key, until: map[string]int64{}, written: map[string]int64{}}
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
	return &Tracker{rdb: rdb, window: o.Window, log: o.Log, now: o.Now, all: newSet(Key), used: newSet(UsedKey),
		pending: map[string]int64{}, local: map[string]int64{}, changes: map[string]int64{}, token: newToken()}
}

// Window is the tracker's window.
func (t *Tracker) Window() time.Duration { return t.window }

// Touch records that resource was used now (it is then active and used).
// leaseEnd, when not zero, is when a lease it granted runs out: the
// resource stays active at least until then plus the window, so that a
// session whose holder died is still swept. It costs no Redis command
// (Run writes it).
func (t *Tracker) Touch(resource string, leaseEnd time.Time) {
	u := t.now().Add(t.window).UnixMilli()
	if !leaseEnd.IsZero() {
		u = max(u, leaseEnd.Add(t.window).UnixMilli())
	}
	t.mu.Lock()
	t.all.touch(resource, u)
	t.used.touch(resource, u)
	t.mu.Unlock()
}

// Changed records that resource's policy (or its lines, settings, grants)
// changed now: it is active, not used. No Redis command.
func (t *Tracker) Changed(resource string) {
	u := t.now().Add(t.window).UnixMilli()
	t.mu.Lock()
	t.all.touch(resource, u)
	t.mu.Unlock()
}

func (s *set) touch(resource string, u int64) {
	if u > s.until[resource] {
		s.until[resource] = u
	}
}

// Flush writes the touches Redis does not know yet, in one ZADD GT a set
// (a score only ever moves forward), publishes the changes (Mutated) of the
// last second in ChangedKey (one ZADD GT, only when there are any), and drops the local touches that ran
// out. A resource is written again only once its "active until" moved by
// more than a tenth of the window. Errors: Redis's; what was not written
// is written by the next Flush.
func (t *Tracker) Flush(ctx context.Context) error {
	return errors.Join(t.flush(ctx, t.all), t.flush(ctx, t.used), t.flushChanges(ctx))
}

func (t *Tracker) flush(ctx context.Context, s *set) error {
	now := t.now().UnixMilli()
	step := t.window.Milliseconds() / 10
	var zs []redis.Z
	t.mu.Lock()
	for r, u := range s.until {
		if u <= now {
			delete(s.until, r)
			delete(s.written, r)
			continue
		}
		if u-s.written[r] > step {
			zs = append(zs, redis.Z{Score: float64(u), Member: r})
		}
	}
	t.mu.Unlock()
	if len(zs) == 0 {
		return nil
	}
	if err := t.rdb.ZAddGT(ctx, s.key, zs...).Err(); err != nil {
		return err
	}
	t.mu.Lock()
	for _, z := range zs {
		r := z.Member.(string)
		s.written[r] = max(s.written[r], int64(z.Score))
	}
	t.mu.Unlock()
	return nil
}

// Trim removes the resources whose "active until" passed from Redis, and
// the changes older than the window.
func (t *Tracker) Trim(ctx context.Context) error {
	now := strconv.FormatInt(t.now().UnixMilli(), 10)
	return errors.Join(t.rdb.ZRemRangeByScore(ctx, Key, "-inf", now).Err(),
		t.rdb.ZRemRangeByScore(ctx, UsedKey, "-inf", now).Err(), t.trimChanges(ctx), t.trimInstances(ctx))
}

// Active returns the active resources (used or changed), sorted: those
// Redis holds as active now (every instance's) and this instance's touches
// not written yet. It reads Redis at most once per second (a second call
// within it answers the last set read). When Redis cannot be read it
// answers the last set read with the local touches, and the error.
func (t *Tracker) Active(ctx context.Context) ([]string, error) { return t.read(ctx, t.all) }

// Used is Active for the resources used (an apply, heartbeat, finish or
// charge), leaving out those only changed: what the readers of balances
// visit (a balance read seeds an unused resource's balance).
func (t *Tracker) Used(ctx context.Context) ([]string, error) { return t.read(ctx, t.used) }

func (t *Tracker) read(ctx context.Context, s *set) ([]string, error) {
	now := t.now().UnixMilli()
	t.mu.Lock()
	fresh := s.remoteT != 0 && now-s.remoteT < 1000
	t.mu.Unlock()
	var err error
	if !fresh {
		var rs []string
		rs, err = t.rdb.ZRangeByScore(ctx, s.key, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
		if err == nil {
			t.mu.Lock()
			s.remote, s.remoteT = rs, now
			t.mu.Unlock()
		}
	}
	t.mu.Lock()
	out := slices.Clone(s.remote)
	for r, u := range s.until {
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
	_ = t.heartbeat(ctx) // before the first change to publish
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if t.Flush(fctx) == nil { // what this instance touched last
				_ = t.leave(fctx) // all published: not a death
			}
			cancel()
			return nil
		case <-tick.C:
		}
		if err := errors.Join(t.Flush(ctx), t.heartbeat(ctx)); err != nil && ctx.Err() == nil {
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
