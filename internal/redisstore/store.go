package redisstore

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

func load(name string) *redis.Script {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return redis.NewScript(string(b))
}

var (
	applyScript     = load("apply.lua")
	heartbeatScript = load("heartbeat.lua")
	finishScript    = load("finish.lua")
	cancelScript    = load("cancel.lua")
	seedScript      = load("seed.lua")
	balanceScript   = load("balance.lua")
	sweepScript     = load("sweep.lua")
	unlockScript    = load("unlock.lua")
	adjustScript    = load("adjust.lua")
	lockScript      = load("lock.lua")
	failOpenScript  = load("failopen.lua")
)

// Store implements quota.BalanceStore on Redis (standalone or cluster).
type Store struct {
	rdb redis.UniversalClient
	// BalanceRetention is how long a period's balance outlives the period's
	// end, for late finishes to refund into (default 7 days).
	BalanceRetention time.Duration

	pipe *pipeliner // nil: auto-pipelining off
}

var _ quota.BalanceStore = (*Store)(nil)

// New wraps a go-redis client, one round trip per script call. The caller
// owns the client and closes it.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, BalanceRetention: 7 * 24 * time.Hour}
}

// NewPipelined is New with auto-pipelining of apply, heartbeat and finish
// (see Pipelining; p.MaxCalls 0 is New). Close the Store before the client.
func NewPipelined(rdb redis.UniversalClient, p Pipelining) *Store {
	s := New(rdb)
	if p.MaxCalls > 0 {
		s.pipe = newPipeliner(rdb, p)
	}
	return s
}

// Close stops auto-pipelining once the pipelines in flight are answered;
// later hot-path calls fail with redis.ErrClosed. It does not close the
// client. A Store made by New has nothing to close.
func (s *Store) Close() {
	if s.pipe != nil {
		s.pipe.stop()
	}
}

// runHot runs one of the hot-path scripts, in the next pipeline when
// auto-pipelining is on.
func (s *Store) runHot(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if s.pipe != nil {
		return s.pipe.run(ctx, script, keys, args...)
	}
	return script.Run(ctx, s.rdb, keys, args...).Result()
}

// Client returns the underlying go-redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

func prefix(resource string) string { return "qc:{" + resource + "}:" }

func limitKey(r string) string              { return prefix(r) + "limit" }
func balanceKey(r string, per int64) string { return prefix(r) + "b:" + strconv.FormatInt(per, 10) }
func sessionKey(r, id string) string        { return prefix(r) + "s:" + id }
func leasesKey(r string) string             { return prefix(r) + "leases" }
func leakedKey(r string) string             { return prefix(r) + "leaked" }

func ms(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// wrap translates Redis failures at the boundary: timeouts, refused
// connections and a closed client become quota.ErrUnavailable.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, redis.ErrClosed), errors.As(err, &ne),
		errors.Is(err, redis.ErrPoolTimeout), isLoading(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("redis %s: %w: %w", op, quota.ErrUnavailable, err)
	}
	return fmt.Errorf("redis %s: %w", op, err)
}

func isLoading(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"} {
			if len(msg) >= len(p) && msg[:len(p)] == p {
				return true
			}
		}
	}
	return false
}

func ints(v any, n int) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < n {
		return nil, fmt.Errorf("unexpected script reply %v", v)
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		switch x := x.(type) {
		case int64:
			out[i] = x
		case string:
			out[i], _ = strconv.ParseInt(x, 10, 64)
		}
	}
	return out, nil
}

// Apply runs apply.lua. See quota.BalanceStore.
func (s *Store) Apply(ctx context.Context, c quota.ApplyCmd) (quota.ApplyResult, error) {
	r := c.ResourceName
	per := c.Period.ID()
	first := "0"
	if c.FirstPeriod {
		first = "1"
	}
	v, err := s.runHot(ctx, applyScript,
		[]string{limitKey(r), balanceKey(r, per), sessionKey(r, c.SessionID), leasesKey(r)},
		itoa(c.Amount), itoa(c.MinAmount), c.ClientID, itoa(per), itoa(c.Period.EndMillis()),
		itoa(c.Lease.Milliseconds()), c.SessionID, first)
	if err != nil {
		return quota.ApplyResult{}, wrap("apply", err)
	}
	n, err := ints(v, 7)
	if err != nil {
		return quota.ApplyResult{}, wrap("apply", err)
	}
	res := quota.ApplyResult{
		Granted: n[1], Remaining: n[2], LeaseExpiresAt: ms(n[3]), StartTime: ms(n[4]),
		PeriodStart: ms(n[5]), Now: ms(n[6]),
	}
	switch n[0] {
	case 1:
		res.Outcome = quota.ApplyGranted
	case 2:
		res.Outcome = quota.ApplyReplayed
		if len(n) >= 10 {
			// Restored from the ledger: the current remaining.
			res.Remaining = n[7] - n[8] - n[9]
		}
	case 3:
		res.Outcome = quota.ApplyExhausted
		if len(n) >= 10 {
			res.Remaining = n[7] - n[8] - n[9]
		}
	case 4:
		res.Outcome = quota.ApplyWrongPeriod
	case 5:
		res.Outcome = quota.ApplyNeedBalance
	case 6:
		return quota.ApplyResult{}, fmt.Errorf("session %s exists with other arguments: %w", c.SessionID, quota.ErrSessionConflict)
	default:
		return quota.ApplyResult{}, fmt.Errorf("apply: unknown script code %d", n[0])
	}
	return res, nil
}

// cancelledRetention is how long a cancelled session's tombstone stays, for
// reconciliation to settle a ledger row whose write failed ambiguously.
const cancelledRetention = 24 * time.Hour

// Cancel runs cancel.lua. See quota.BalanceStore.
func (s *Store) Cancel(ctx context.Context, resource, sessionID string) error {
	err := cancelScript.Run(ctx, s.rdb,
		[]string{sessionKey(resource, sessionID), leasesKey(resource)},
		sessionID, prefix(resource)+"b:", itoa(cancelledRetention.Milliseconds())).Err()
	return wrap("cancel", err)
}

// Heartbeat runs heartbeat.lua. See quota.BalanceStore.
func (s *Store) Heartbeat(ctx context.Context, resource, sessionID, clientID string, lease time.Duration) (time.Time, error) {
	v, err := s.runHot(ctx, heartbeatScript,
		[]string{sessionKey(resource, sessionID), leasesKey(resource)},
		itoa(lease.Milliseconds()), sessionID, clientID)
	if err != nil {
		return time.Time{}, wrap("heartbeat", err)
	}
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return time.Time{}, fmt.Errorf("heartbeat: unexpected reply %v", v)
	}
	switch arr[0] {
	case int64(0):
		return time.Time{}, fmt.Errorf("session %s: %w", sessionID, quota.ErrSessionNotFound)
	case int64(1):
		st, _ := arr[1].(string)
		return time.Time{}, &quota.NotActiveError{SessionID: sessionID, Status: quota.Status(st)}
	}
	exp, _ := arr[1].(int64)
	return ms(exp), nil
}

// Finish runs finish.lua. See quota.BalanceStore.
func (s *Store) Finish(ctx context.Context, c quota.FinishCmd) (quota.FinishResult, error) {
	r := c.ResourceName
	v, err := s.runHot(ctx, finishScript,
		[]string{sessionKey(r, c.SessionID), leasesKey(r), limitKey(r)},
		itoa(c.Actual), itoa(c.Retention.Milliseconds()), c.SessionID, prefix(r)+"b:", c.ClientID)
	if err != nil {
		return quota.FinishResult{}, wrap("finish", err)
	}
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return quota.FinishResult{}, fmt.Errorf("finish: unexpected reply %v", v)
	}
	switch arr[0] {
	case int64(0):
		return quota.FinishResult{}, fmt.Errorf("session %s: %w", c.SessionID, quota.ErrSessionNotFound)
	case int64(6):
		return quota.FinishResult{}, fmt.Errorf("session %s was finished with another amount: %w", c.SessionID, quota.ErrSessionConflict)
	case int64(7):
		return quota.FinishResult{}, &quota.ValidationError{Field: "actualUsedAmount",
			Reason: "would overflow the period's usage counter (over 9e18 in one period)"}
	}
	n, err := ints(v, 14)
	if err != nil {
		return quota.FinishResult{}, wrap("finish", err)
	}
	client, _ := arr[10].(string)
	var remaining int64 // the period's balance is gone: nothing left to report
	if limit, _ := arr[11].(string); limit != "" {
		remaining = n[11] - n[12] - n[13]
	}
	return quota.FinishResult{
		Replayed: n[0] == 2, WasLeaked: n[9] == 1, ClientID: client,
		Granted: n[1], Charged: n[2], Refunded: n[3], Overage: n[4], Remaining: remaining,
		PeriodStart: ms(n[6]), StartTime: ms(n[7]), EndTime: ms(n[8]),
	}, nil
}

// Balance runs balance.lua. See quota.BalanceStore.
func (s *Store) Balance(ctx context.Context, resource string, per quota.Period) (quota.Balance, error) {
	v, err := balanceScript.Run(ctx, s.rdb,
		[]string{limitKey(resource), balanceKey(resource, per.ID()), leasesKey(resource)}).Result()
	if err != nil {
		return quota.Balance{}, wrap("balance", err)
	}
	n, err := ints(v, 5)
	if err != nil {
		return quota.Balance{}, wrap("balance", err)
	}
	return quota.Balance{Exists: n[0] == 1, Limit: n[1], Charged: n[2], Reserved: n[3], ActiveSessions: n[4]}, nil
}

// seedArgs builds seed.lua's ARGV.
func seedArgs(resource string, limit int64, t quota.PeriodTotals, expireAt int64, flag string, lease time.Duration, open []quota.UsageRecord) []any {
	args := make([]any, 0, 7+7*len(open))
	args = append(args, itoa(limit), itoa(t.Charged), itoa(t.Reserved), itoa(expireAt), flag,
		itoa(lease.Milliseconds()), prefix(resource))
	for _, r := range open {
		args = append(args, r.SessionID, itoa(r.ApplyAmount), itoa(r.MinAmount), r.ClientID,
			itoa(r.GrantedAmount), itoa(r.StartTime.UnixMilli()), itoa(r.PeriodStart.UnixMilli()))
	}
	return args
}

// seedChunk bounds the open sessions restored per seed.lua call.
const seedChunk = 500

// Seed runs seed.lua, restoring open sessions in chunks of seedChunk after
// the first call wrote the balance. A period that ends is kept
// BalanceRetention past its end.
func (s *Store) Seed(ctx context.Context, resource string, per quota.Period, limit int64, t quota.PeriodTotals, open []quota.UsageRecord, lease time.Duration) (bool, error) {
	var expireAt int64
	if !per.End.IsZero() {
		expireAt = per.End.Add(s.BalanceRetention).UnixMilli()
	}
	keys := []string{limitKey(resource), balanceKey(resource, per.ID()), leasesKey(resource)}
	for first := true; first || len(open) > 0; first = false {
		chunk := open[:min(len(open), seedChunk)]
		open = open[len(chunk):]
		flag := "0"
		if first {
			flag = "1"
		}
		n, err := seedScript.Run(ctx, s.rdb, keys, seedArgs(resource, limit, t, expireAt, flag, lease, chunk)...).Int64()
		if err != nil {
			return false, wrap("seed", err)
		}
		if first && n == 0 {
			return false, nil // another seeder won and restores the sessions
		}
	}
	return true, nil
}

// TryLock takes qc:{r}:lock:<name> for ttl with a random token (lock.lua);
// it returns "" when the lock is held by someone else. A retry of the same
// call (go-redis resends after a timeout) finds its own token and succeeds.
func (s *Store) TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	n, err := lockScript.Run(ctx, s.rdb, []string{prefix(resource) + "lock:" + name}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return "", wrap("lock", err)
	}
	if n == 0 {
		return "", nil
	}
	return token, nil
}

// Unlock deletes the lock only if token still holds it (unlock.lua), so a
// holder whose lock expired never releases someone else's.
func (s *Store) Unlock(ctx context.Context, resource, name, token string) error {
	return wrap("unlock", unlockScript.Run(ctx, s.rdb, []string{prefix(resource) + "lock:" + name}, token).Err())
}

// SetLimit sets the resource's limit; every period's remaining moves with it.
func (s *Store) SetLimit(ctx context.Context, resource string, limit int64) error {
	return wrap("set limit", s.rdb.Set(ctx, limitKey(resource), itoa(limit), 0).Err())
}

// Sweep runs sweep.lua. See quota.BalanceStore.
func (s *Store) Sweep(ctx context.Context, resource string, max int, retention time.Duration) ([]quota.LeakedSession, error) {
	v, err := sweepScript.Run(ctx, s.rdb,
		[]string{leasesKey(resource), leakedKey(resource)},
		max, prefix(resource), itoa(retention.Milliseconds())).Result()
	if err != nil {
		return nil, wrap("sweep", err)
	}
	arr, _ := v.([]any)
	out := make([]quota.LeakedSession, 0, len(arr)/6)
	for i := 0; i+5 < len(arr); i += 6 {
		id, _ := arr[i].(string)
		f := make([]int64, 4)
		for j := 1; j < 5; j++ {
			str, _ := arr[i+j].(string)
			f[j-1], _ = strconv.ParseInt(str, 10, 64)
		}
		client, _ := arr[i+5].(string)
		out = append(out, quota.LeakedSession{
			ResourceName: resource, SessionID: id, ClientID: client, PeriodStart: ms(f[0]),
			Granted: f[1], EndTime: ms(f[2]), Fresh: f[3] == 1,
		})
	}
	return out, nil
}

// AckLeaks forgets swept sessions whose ledger rows are now LEAKED.
func (s *Store) AckLeaks(ctx context.Context, resource string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	return wrap("ack leaks", s.rdb.SRem(ctx, leakedKey(resource), members...).Err())
}

// OpenSessionIDs lists the resource's USING sessions whose lease ends before
// leaseBefore, from the lease index (ZRANGEBYSCORE: cost grows with the
// sessions listed, not with all of them).
func (s *Store) OpenSessionIDs(ctx context.Context, resource string, leaseBefore time.Time) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, leasesKey(resource), &redis.ZRangeBy{
		Min: "-inf", Max: "(" + itoa(leaseBefore.UnixMilli()),
	}).Result()
	return ids, wrap("open sessions", err)
}

// sessionFields are read by Sessions, in this order.
var sessionFields = []string{"status", "client", "granted", "actual", "refunded", "overage", "period", "start", "end", "leaked", "amount", "min", "fo"}

// Sessions reads session hashes in one pipeline; missing ones are absent.
func (s *Store) Sessions(ctx context.Context, resource string, ids []string) (map[string]quota.SessionState, error) {
	out := make(map[string]quota.SessionState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, sessionKey(resource, id), sessionFields...)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("sessions", err)
	}
	for i, c := range cmds {
		v := c.Val()
		if len(v) != len(sessionFields) || v[0] == nil {
			continue
		}
		str := func(j int) string { x, _ := v[j].(string); return x }
		num := func(j int) int64 { n, _ := strconv.ParseInt(str(j), 10, 64); return n }
		out[ids[i]] = quota.SessionState{
			Status: quota.Status(str(0)), ClientID: str(1), Granted: num(2), Actual: num(3),
			Refunded: num(4), Overage: num(5), PeriodStart: ms(num(6)), StartTime: ms(num(7)),
			EndTime: ms(num(8)), WasLeaked: str(9) == "1",
			ApplyAmount: num(10), MinAmount: num(11), FailOpen: str(12) == "1",
		}
	}
	return out, nil
}

// RestoreSessions runs seed.lua in its sessions-only mode, in chunks.
func (s *Store) RestoreSessions(ctx context.Context, resource string, open []quota.UsageRecord, lease time.Duration) error {
	keys := []string{limitKey(resource), balanceKey(resource, 0), leasesKey(resource)}
	for len(open) > 0 {
		chunk := open[:min(len(open), seedChunk)]
		open = open[len(chunk):]
		if err := seedScript.Run(ctx, s.rdb, keys, seedArgs(resource, 0, quota.PeriodTotals{}, 0, "0", lease, chunk)...).Err(); err != nil {
			return wrap("restore sessions", err)
		}
	}
	return nil
}

// Adjust runs adjust.lua. See quota.BalanceStore.
func (s *Store) Adjust(ctx context.Context, resource string, per quota.Period, dCharged, dReserved int64) (bool, error) {
	n, err := adjustScript.Run(ctx, s.rdb, []string{balanceKey(resource, per.ID())}, itoa(dCharged), itoa(dReserved)).Int64()
	if err != nil {
		return false, wrap("adjust", err)
	}
	return n == 1, nil
}

// MarkFailOpen runs failopen.lua. See quota.BalanceStore.
func (s *Store) MarkFailOpen(ctx context.Context, resource, sessionID string) error {
	n, err := failOpenScript.Run(ctx, s.rdb, []string{sessionKey(resource, sessionID), prefix(resource) + "failopen"}, sessionID).Int64()
	if err != nil {
		return wrap("mark fail-open", err)
	}
	if n == 0 {
		return fmt.Errorf("mark fail-open %s: %w", sessionID, quota.ErrSessionNotFound)
	}
	return nil
}

// FailOpenSessions lists the sessions flagged by MarkFailOpen whose ledger
// rows are not yet written (qc:{r}:failopen).
func (s *Store) FailOpenSessions(ctx context.Context, resource string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, prefix(resource)+"failopen").Result()
	return ids, wrap("fail-open sessions", err)
}

// AckFailOpen forgets flagged sessions whose ledger rows are written.
func (s *Store) AckFailOpen(ctx context.Context, resource string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	return wrap("ack fail-open", s.rdb.SRem(ctx, prefix(resource)+"failopen", members...).Err())
}
