package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Store implements quota.BalanceStore on Redis (standalone or cluster).
type Store struct {
	rdb redis.UniversalClient
	// BalanceRetention is how long a period's balance outlives the period's
	// end, for late finishes to refund into (default 7 days).
	BalanceRetention time.Duration
	// HashSessions makes apply.lua write every new session in the full
	// form, one hash field each, instead of the packed record of its fast
	// path (scripts/session_record.lib; ~11k fewer Redis instructions per
	// apply). Every script and reader of this build reads both forms;
	// builds before the packed record read only the full one, so a rolling
	// upgrade from one sets this (QC_REDIS_SESSION_RECORD=hash) until no
	// older instance is left (docs/operations.md, "Running it"). Set it before the
	// Store is used.
	HashSessions bool

	pipe *pipeliner // nil: auto-pipelining off
	wait Wait       // see WithWait

	// periods remembers, per resource, the period of its latest granted
	// apply (ms): finish.lua and cancel.lua are given that period's balance
	// key and answer with the session's own period when it differs (one
	// more call, on a period change or a fresh process).
	periods sync.Map  // resource → int64
	slots   sync.Map  // resource → its cluster slot (int64), see Masters
	burns   burnTrims // when RecordBurn last trimmed each resource

	// onChange, when set, is called with the resource of every
	// state-changing call (see OnChange).
	onChange func(resource string)
}

// OnChange sets f to be called with the resource after every call that may
// have changed what Redis holds of it (a state-changing script, whether it
// answered or failed: a call that timed out may still have run; SetLimit,
// PutGrant), but not after its reads nor the lock scripts (a lock changes
// no balance). quota-center serve passes activity.Tracker.Mutated, so that
// the background loops skip the resources nothing changed (issue 23 §1).
// f must be cheap and safe for concurrent use. Call it before the Store is
// used.
func (s *Store) OnChange(f func(resource string)) *Store {
	s.onChange = f
	return s
}

// changed calls onChange with the resource of key (qc:{resource}:…).
func (s *Store) changed(script *redis.Script, key string) {
	if s.onChange == nil || script == lockScript || script == unlockScript {
		return
	}
	if r, ok := resourceOf(key); ok {
		s.onChange(r)
	}
}

// resourceOf is the resource of one of its keys, qc:{resource}:… (the
// hash tag: up to the first '}', as Redis Cluster reads it).
func resourceOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "qc:{")
	if !ok {
		return "", false
	}
	r, _, ok := strings.Cut(rest, "}")
	return r, ok && r != ""
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
		defer s.changed(script, keys[0])
		return retryMoving(ctx, func() (any, error) { return s.pipe.run(ctx, script, keys, args...) })
	}
	return s.run(ctx, script, keys, args...)
}

func prefix(resource string) string { return "qc:{" + resource + "}:" }

func limitKey(r string) string              { return prefix(r) + "limit" }
func balanceKey(r string, per int64) string { return prefix(r) + "b:" + strconv.FormatInt(per, 10) }
func sessionKey(r, id string) string        { return prefix(r) + "s:" + id }
func leasesKey(r string) string             { return prefix(r) + "leases" }
func leakedKey(r string) string             { return prefix(r) + "leaked" }
func failOpenKey(r string) string           { return prefix(r) + "failopen" }
func lockKey(r, name string) string         { return prefix(r) + "lock:" + name }
func adjustKey(r, token string) string      { return prefix(r) + "adj:" + token }

// scopedKey is the session key of c's scoped id (quota.ApplyCmd.OtherSessionID)
// for apply.lua, or, without one, c's own (never read).
func scopedKey(r string, c quota.ApplyCmd) string {
	if c.OtherSessionID == "" {
		return sessionKey(r, c.SessionID)
	}
	return sessionKey(r, c.OtherSessionID)
}

func ms(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// wrap translates Redis failures at the boundary: timeouts, refused
// connections, a closed client and the transient states of a server or a
// cluster (loading, busy, failing over, slots moving) become
// quota.ErrUnavailable; a slot moving between cluster masters becomes
// quota.ErrSlotMoving (which matches ErrUnavailable too), see slotMoving.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	switch {
	case slotMoving(err):
		return fmt.Errorf("redis %s: %w: %w", op, quota.ErrSlotMoving, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, redis.ErrClosed), errors.As(err, &ne),
		errors.Is(err, redis.ErrPoolTimeout), isTransient(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("redis %s: %w: %w", op, quota.ErrUnavailable, err)
	case redis.HasErrorPrefix(err, negativePrefix):
		return fmt.Errorf("redis %s: %w: %w", op, quota.ErrNegativeBalance, err)
	}
	return fmt.Errorf("redis %s: %w", op, err)
}

// negativePrefix starts the error reply of a script that refused to leave
// a balance's charged or reserved below zero (quota.ErrNegativeBalance).
const negativePrefix = "QCNEGATIVE"

// transientPrefixes are the Redis error replies of a server that cannot
// answer now but will: loading its data, running a long script, a replica
// cut off from its master, a cluster slot moving or without a master, a
// slot served elsewhere (MOVED, ASK: seen only when WAIT sends to a node
// directly, see Wait; the cluster client learns the slots again).
var transientPrefixes = []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MOVED", "ASK"}

func isTransient(err error) bool {
	for _, p := range transientPrefixes {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// Apply runs apply.lua, the one apply of every resource: c.Pools nil is a
// plain resource (no lines, no temporary grants), else the script decides
// which pools the grant draws from or why it is refused (ApplyResult.Drawn,
// Reason, Tight; a replay answers the first apply's). With c.Pools.NoGrants
// the script does not read the resource's temporary grants. Remaining is
// the resource's as finish and status answer it (quota.Balance.Remaining:
// limit − charged − reserved; with pools, the grants' room added, never
// negative); a grant or a refusal on a line also answers LineRemaining
// (what the line's next apply of the same kind could be granted). See
// quota.BalanceStore.
// Errors: quota.ErrSessionConflict, pools.ErrUnknownLine, pools.ErrLineClosing, failures wrapped
// by wrap.
func (s *Store) Apply(ctx context.Context, c quota.ApplyCmd) (quota.ApplyResult, error) {
	script, keys, args := s.applyCall(c)
	v, err := s.runHot(ctx, script, keys, args...)
	if err != nil {
		return quota.ApplyResult{}, wrap("apply", err)
	}
	return s.applyResult(v, c)
}

// applyCall is apply.lua's call for c: the script (its variant for
// HashSessions), its keys and its arguments.
func (s *Store) applyCall(c quota.ApplyCmd) (*redis.Script, []string, []any) {
	r := c.ResourceName
	per := c.Period.ID()
	keys := []string{limitKey(r), balanceKey(r, per), sessionKey(r, c.SessionID), leasesKey(r), scopedKey(r, c)}
	// Numbers go as int64: go-redis writes them in decimal, as itoa would,
	// without a string made and boxed for each (small ones box for free).
	args := []any{c.Amount, c.MinAmount, c.ClientID, per, c.Period.EndMillis(),
		c.Lease.Milliseconds(), c.SessionID, luaFlag(c.FirstPeriod), c.Attempt, c.OtherSessionID}
	if p := c.Pools; p != nil {
		// A plain resource's apply reads neither the pools' keys nor their
		// arguments (apply.lua, ARGV[11] absent): they are not sent.
		mode := "2"
		if p.NoGrants {
			mode = "1"
		}
		keys = append(keys, poolKey(r), grantsKey(r))
		args = append(args, mode, p.Line, luaBool(p.Critical), luaBool(p.Continuation))
	}
	if s.HashSessions {
		return applyHashScript, keys, args
	}
	return applyScript, keys, args
}

// applyResult is Apply's answer to c from apply.lua's reply v (or
// apply_batch.lua's for c).
func (s *Store) applyResult(v any, c quota.ApplyCmd) (quota.ApplyResult, error) {
	r, per, line := c.ResourceName, c.Period.ID(), ""
	if c.Pools != nil {
		line = c.Pools.Line
	}
	a, err := decodeApply(v)
	if err != nil {
		return quota.ApplyResult{}, wrap("apply", err)
	}
	if a.short {
		// The plain grant's short answer: what the caller knows is not sent.
		a.start, a.lease, a.periodStart = a.now, a.now+c.Lease.Milliseconds(), per
		a.drawn = quota.PoolSplit{Base: a.granted}
	}
	res := quota.ApplyResult{
		OtherForm: a.scoped,
		Granted:   a.granted, Remaining: a.remaining, LeaseExpiresAt: ms(a.lease), StartTime: ms(a.start),
		PeriodStart: ms(a.periodStart), Now: ms(a.now),
		Drawn: a.drawn, Reason: pools.Reason(a.reason), Tight: a.tight, SpareMove: a.spare,
	}
	if !a.ownRemaining {
		// A plain refusal, or a replay of a session restored from the
		// ledger: the period's remaining, exact past 2^53.
		res.Remaining = a.periodRemaining()
	}
	switch a.code {
	case applyGranted:
		res.Outcome = quota.ApplyGranted
		// finish and cancel guess the session's period from it; stored only
		// when it changed (a Store allocates, a Load does not).
		if p, _ := s.periods.Load(r); p == nil || p.(int64) != per {
			s.periods.Store(r, per)
		}
	case applyReplayed:
		res.Outcome = quota.ApplyReplayed
	case applyRefused:
		res.Outcome = quota.ApplyExhausted
	case applyWrongPeriod:
		res.Outcome = quota.ApplyWrongPeriod
	case applyNeedBalance:
		res.Outcome = quota.ApplyNeedBalance
	case applyConflict:
		return quota.ApplyResult{}, fmt.Errorf("session %s exists with other arguments: %w", quota.PublicSessionID(c.SessionID), quota.ErrSessionConflict)
	case applyUnknownLine:
		return quota.ApplyResult{}, fmt.Errorf("line %q of %s: %w", line, r, pools.ErrUnknownLine)
	case applyLineClosing:
		return quota.ApplyResult{}, fmt.Errorf("line %q of %s: %w", line, r, pools.ErrLineClosing)
	}
	if c.Pools != nil && (line != "" || a.hasBalance) && (a.code == applyGranted || a.code == applyReplayed || a.code == applyRefused) {
		// remainingQuota is the resource's, as finish and status answer it
		// (the grants' room added: the script's held and room), also on a
		// resource with grants and no lines, whose script answers its own
		// room as remaining; what a line could still be granted is
		// LineRemaining.
		if line != "" {
			res.LineRemaining = a.remaining
		}
		res.Remaining = quota.RemainingWithGrants(a.periodRemaining(), true, a.held, a.room)
	}
	return res, nil
}

// periodGuess is the period (ms) whose balance key finish.lua and
// cancel.lua are given first: the resource's latest granted apply's, or -1
// (no period: the script answers with the session's own).
func (s *Store) periodGuess(resource string) int64 {
	if v, ok := s.periods.Load(resource); ok {
		return v.(int64)
	}
	return -1
}

// maxPeriodTries bounds the calls of finish.lua and cancel.lua: the first
// with the guessed period, the second with the session's own; a third is
// needed only if the session was replaced in between (cancelled, then
// applied again in another period).
const maxPeriodTries = 3

// cancelledRetention is how long a cancelled session's tombstone stays, for
// reconciliation to settle a ledger row whose write failed ambiguously.
const cancelledRetention = 24 * time.Hour

// Cancel runs cancel.lua. See quota.BalanceStore.
func (s *Store) Cancel(ctx context.Context, resource, sessionID string) error {
	_, err := s.cancel(ctx, resource, sessionID, "")
	return err
}

// Compensate runs cancel.lua keyed by the apply attempt. See
// quota.BalanceStore.
func (s *Store) Compensate(ctx context.Context, resource, sessionID, attempt string) (quota.CompensateOutcome, error) {
	if attempt == "" {
		return 0, fmt.Errorf("compensate %s: no attempt token", sessionID)
	}
	c, err := s.cancel(ctx, resource, sessionID, attempt)
	switch {
	case err != nil:
		return 0, err
	case c == cancelGivenBack:
		return quota.CompensateGivenBack, nil
	case c == cancelAbsent:
		return quota.CompensateAbsent, nil
	}
	return quota.CompensateNotItsOwn, nil
}

// cancel runs cancel.lua, following the session's period.
func (s *Store) cancel(ctx context.Context, resource, sessionID, attempt string) (cancelCode, error) {
	per := s.periodGuess(resource)
	for try := 1; ; try++ {
		v, err := s.run(ctx, cancelScript,
			[]string{sessionKey(resource, sessionID), leasesKey(resource), balanceKey(resource, per), grantsKey(resource)},
			sessionID, itoa(cancelledRetention.Milliseconds()), itoa(per), attempt)
		if err != nil {
			return 0, wrap("cancel", err)
		}
		c, own, err := decodeCancel(v)
		if err != nil {
			return 0, wrap("cancel", err)
		}
		if c != cancelOtherPeriod {
			return c, nil
		}
		if try == maxPeriodTries {
			return 0, fmt.Errorf("redis cancel %s: its period changed %d times in a row", sessionID, try)
		}
		per = own
	}
}

// Heartbeat runs heartbeat.lua. See quota.BalanceStore.
func (s *Store) Heartbeat(ctx context.Context, resource, sessionID, clientID string, lease time.Duration) (time.Time, error) {
	v, err := s.runHot(ctx, heartbeatScript,
		[]string{sessionKey(resource, sessionID), leasesKey(resource)},
		lease.Milliseconds(), sessionID, clientID) // an int64 goes in decimal, as itoa would
	if err != nil {
		return time.Time{}, wrap("heartbeat", err)
	}
	h, err := decodeHeartbeat(v)
	if err != nil {
		return time.Time{}, wrap("heartbeat", err)
	}
	switch h.code {
	case heartbeatNotFound:
		return time.Time{}, fmt.Errorf("session %s: %w", sessionID, quota.ErrSessionNotFound)
	case heartbeatNotActive:
		return time.Time{}, &quota.NotActiveError{SessionID: sessionID, Status: quota.Status(h.status)}
	}
	return ms(h.lease), nil
}

// Finish runs finish.lua. See quota.BalanceStore.
func (s *Store) Finish(ctx context.Context, c quota.FinishCmd) (quota.FinishResult, error) {
	r := c.ResourceName
	per := s.periodGuess(r)
	var f finishReply
	for try := 1; ; try++ {
		v, err := s.runHot(ctx, finishScript,
			[]string{sessionKey(r, c.SessionID), leasesKey(r), limitKey(r), balanceKey(r, per), grantsKey(r)},
			c.Actual, c.Retention.Milliseconds(), c.SessionID, c.ClientID, per) // int64s go in decimal
		if err != nil {
			return quota.FinishResult{}, wrap("finish", err)
		}
		if f, err = decodeFinish(v); err != nil {
			return quota.FinishResult{}, wrap("finish", err)
		}
		if f.code != finishOtherPeriod {
			break
		}
		if try == maxPeriodTries {
			return quota.FinishResult{}, fmt.Errorf("redis finish %s: its period changed %d times in a row", c.SessionID, try)
		}
		per = f.period
	}
	switch f.code {
	case finishNotFound:
		return quota.FinishResult{}, fmt.Errorf("session %s: %w", c.SessionID, quota.ErrSessionNotFound)
	case finishConflict:
		return quota.FinishResult{}, fmt.Errorf("session %s was finished with another amount: %w", c.SessionID, quota.ErrSessionConflict)
	case finishOverflow:
		return quota.FinishResult{}, &quota.ValidationError{Field: "actualUsedAmount",
			Reason: "would overflow the period's usage counter (over 9e18 in one period)"}
	}
	var remaining int64 // the period's balance is gone: nothing left to report
	if f.hasBalance {
		remaining = quota.RemainingWithGrants(f.limit-f.charged-f.reserved, f.pools, f.held, f.room)
	}
	return quota.FinishResult{
		Replayed: f.code == finishReplayed, WasLeaked: f.leaked, ClientID: f.client,
		Granted: f.granted, Charged: f.actual, Refunded: f.refunded, Overage: f.overage, Remaining: remaining,
		PeriodStart: ms(f.period), StartTime: ms(f.start), EndTime: ms(f.end),
	}, nil
}

// Balance runs balance.lua. See quota.BalanceStore.
func (s *Store) Balance(ctx context.Context, resource string, per quota.Period) (quota.Balance, error) {
	v, err := s.read(ctx, balanceScript, balanceKeys(quota.BalanceRead{Resource: resource, Period: per}))
	if err != nil {
		return quota.Balance{}, wrap("balance", err)
	}
	b, err := decodeBalance(v)
	if err != nil {
		return quota.Balance{}, wrap("balance", err)
	}
	return b, nil
}
