package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// randomToken is 24 random hex digits: lock tokens, adjust marks, epochs.
func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// seedKeys builds seed.lua's KEYS: the limit, the period's balance, the
// lease index, the fencing lock (f's; an unused key of the resource when f
// is the zero Fence), and each open session's key.
func seedKeys(resource string, per int64, f quota.Fence, open []quota.UsageRecord) []string {
	keys := make([]string, 0, 4+len(open))
	keys = append(keys, limitKey(resource), balanceKey(resource, per), leasesKey(resource), lockKey(resource, f.Name))
	for _, r := range open {
		keys = append(keys, sessionKey(resource, r.SessionID))
	}
	return keys
}

// seedArgs builds seed.lua's ARGV.
// epoch is the rebuild's token ("" for calls that rebuild no balance) and
// per the period of the balance key.
func seedArgs(limit int64, t quota.PeriodTotals, expireAt int64, mode string, lease time.Duration, f quota.Fence,
	epoch string, per int64, open []quota.UsageRecord) []any {
	args := make([]any, 0, 9+seedSessionArgs*len(open))
	args = append(args, itoa(limit), itoa(t.Charged), itoa(t.Reserved), itoa(expireAt), mode,
		itoa(lease.Milliseconds()), f.Token, epoch, itoa(per))
	for _, r := range open {
		status, end := string(quota.StatusUsing), "0"
		if r.Status == quota.StatusLeaked {
			status, end = string(quota.StatusLeaked), itoa(r.EndTime.UnixMilli())
		}
		args = append(args, r.SessionID, itoa(r.ApplyAmount), itoa(r.MinAmount), r.ClientID,
			itoa(r.GrantedAmount), itoa(r.StartTime.UnixMilli()), itoa(r.PeriodStart.UnixMilli()), status, end)
		// The pool split (apply.lua's session fields), so that a
		// finish refunds the pools the grant came from.
		d := r.Drawn
		if !r.PoolSession() {
			args = append(args, "0", "", "0", "0", "0", "0", "")
			continue
		}
		buf := d.Buffer
		if r.BusinessLine == "" {
			buf = d.Base // a resource without lines: 'db' holds what came from its limit
		}
		args = append(args, "1", r.BusinessLine, itoa(d.Dedicated), itoa(d.Shared), itoa(buf), itoa(d.Grant), d.Grants)
	}
	return args
}

// seedSessionArgs is how many ARGV seed.lua takes per session.
const seedSessionArgs = 16

// seedChunk bounds the open sessions restored per seed.lua call.
const seedChunk = 500

// Seed is SeedFenced without a fence.
func (s *Store) Seed(ctx context.Context, resource string, per quota.Period, limit int64, t quota.PeriodTotals, open []quota.UsageRecord, lease time.Duration) (bool, error) {
	return s.SeedFenced(ctx, quota.Fence{}, resource, per, limit, t, open, lease)
}

// SeedFenced runs seed.lua, restoring open sessions in chunks of seedChunk
// after the first call wrote the balance. A period that ends is kept
// BalanceRetention past its end. Each call writes only while the lock f
// holds f.Token: otherwise it writes nothing and SeedFenced returns
// quota.ErrLockLost (a later chunk's refusal leaves the earlier chunks
// written: the balance and those sessions stand, as another seeder would
// have left them). See quota.Seeder.
func (s *Store) SeedFenced(ctx context.Context, f quota.Fence, resource string, per quota.Period, limit int64, t quota.PeriodTotals, open []quota.UsageRecord, lease time.Duration) (bool, error) {
	var expireAt int64
	if !per.End.IsZero() {
		expireAt = per.End.Add(s.BalanceRetention).UnixMilli()
	}
	epoch := randomToken()
	for first := true; first || len(open) > 0; first = false {
		chunk := open[:min(len(open), seedChunk)]
		open = open[len(chunk):]
		mode, valid := "0", []seedCode{seedWrote, seedFenced} // sessions only: always runs
		if first {
			mode, valid = "1", []seedCode{seedAlreadyThere, seedWrote, seedFenced}
		}
		v, err := s.run(ctx, seedScript, seedKeys(resource, per.ID(), f, chunk),
			seedArgs(limit, t, expireAt, mode, lease, f, epoch, per.ID(), chunk)...)
		if err != nil {
			return false, wrap("seed", err)
		}
		c, err := flag("seed.lua", v, valid...)
		if err != nil {
			return false, wrap("seed", err)
		}
		if c == seedFenced {
			return false, fmt.Errorf("seed %s: lock %s: %w", resource, f.Name, quota.ErrLockLost)
		}
		if first && c == seedAlreadyThere {
			return false, nil // another seeder won and restores the sessions
		}
	}
	return true, nil
}

// TryLock takes qc:{r}:lock:<name> for ttl with a random token (lock.lua);
// it returns "" when the lock is held by someone else. A retry of the same
// call (go-redis resends after a timeout) finds its own token and succeeds.
func (s *Store) TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error) {
	token := randomToken()
	held, err := s.RenewLock(ctx, resource, name, token, ttl)
	if err != nil || !held {
		return "", err
	}
	return token, nil
}

// RenewLock extends a lock token holds to ttl from now (lock.lua), taking
// it again if it expired and nobody else took it; false means another
// holder has it. See quota.Locker.
func (s *Store) RenewLock(ctx context.Context, resource, name, token string, ttl time.Duration) (bool, error) {
	v, err := s.run(ctx, lockScript, []string{lockKey(resource, name)}, token, ttl.Milliseconds())
	if err != nil {
		return false, wrap("lock", err)
	}
	c, err := flag("lock.lua", v, lockHeldByOther, lockHeld)
	if err != nil {
		return false, wrap("lock", err)
	}
	return c == lockHeld, nil
}

// Unlock deletes the lock only if token still holds it (unlock.lua), so a
// holder whose lock expired never releases someone else's.
func (s *Store) Unlock(ctx context.Context, resource, name, token string) error {
	v, err := s.run(ctx, unlockScript, []string{lockKey(resource, name)}, token)
	if err == nil {
		_, err = flag("unlock.lua", v, unlockNotHeld, unlockReleased)
	}
	return wrap("unlock", err)
}

// SetLimit sets the resource's limit; every period's remaining moves with it.
func (s *Store) SetLimit(ctx context.Context, resource string, limit int64) error {
	defer s.changed(nil, limitKey(resource))
	return wrap("set limit", s.rdb.Set(ctx, limitKey(resource), itoa(limit), 0).Err())
}

// maxSweepRounds bounds the rounds of one Sweep call (see Sweep).
const maxSweepRounds = 4

// Sweep moves up to max expired sessions to LEAKED and reports up to max
// unacknowledged earlier ones. See quota.BalanceStore.
//
// Each round runs expired.lua (the candidates), reads their periods, then
// runs sweep.lua with every key it touches; a candidate another sweeper
// took in between is skipped, and a further round (at most
// maxSweepRounds) looks for more while the lease index had as many
// candidates as asked for.
func (s *Store) Sweep(ctx context.Context, resource string, max int, retention time.Duration) ([]quota.LeakedSession, error) {
	out, _, err := s.SweepHeld(ctx, resource, max, retention, nil)
	return out, err
}

// SweepHeld is Sweep that sweeps only the expired sessions held reports
// true for (held nil: all of them). The others are left as they are, in
// the lease index, and returned as orphans (issue 11 §3.1: a reservation
// whose apply was refused, with no ledger row, must not be charged as
// LEAKED); the caller decides what to do with them. An error of held
// stops the sweep with nothing swept in that round.
func (s *Store) SweepHeld(ctx context.Context, resource string, max int, retention time.Duration,
	held func(ids []string) (map[string]bool, error)) (leaks []quota.LeakedSession, orphans []string, err error) {
	leaks, orphans, _, err = s.SweepHeldNext(ctx, resource, max, retention, held)
	return leaks, orphans, err
}

// SweepHeldNext is SweepHeld also answering next: from the first round's look at the lease index
// until the earliest lease running then ends (negative: none). Until then an unchanged resource
// has nothing new to sweep (sweeper.Config.Visits).
func (s *Store) SweepHeldNext(ctx context.Context, resource string, max int, retention time.Duration,
	held func(ids []string) (map[string]bool, error)) (leaks []quota.LeakedSession, orphans []string, next time.Duration, err error) {
	var out []quota.LeakedSession
	next = -1
	fresh := 0
	skipped := map[string]bool{} // orphans: listed again by later rounds, skipped
	for round := 0; round < maxSweepRounds && fresh < max; round++ {
		want, leakedMax := max-fresh+len(skipped), 0
		if round == 0 {
			leakedMax = max // reported once per call
		}
		v, err := s.read(ctx, expiredScript, []string{leasesKey(resource), leakedKey(resource)}, want, leakedMax)
		if err != nil {
			return nil, nil, -1, wrap("sweep", err)
		}
		listed, leaked, nxt, err := decodeExpired(v)
		if err != nil {
			return nil, nil, -1, wrap("sweep", err)
		}
		if round == 0 {
			next = nxt
		}
		expired := make([]string, 0, len(listed))
		for _, id := range listed {
			if !skipped[id] {
				expired = append(expired, id)
			}
		}
		if held != nil && len(expired) > 0 {
			h, err := held(expired)
			if err != nil {
				return out, orphans, -1, err
			}
			kept := expired[:0]
			for _, id := range expired {
				if h[id] {
					kept = append(kept, id)
				} else {
					skipped[id] = true
					orphans = append(orphans, id)
				}
			}
			expired = kept
		}
		if len(expired) == 0 && len(leaked) == 0 {
			if len(listed) < want {
				break
			}
			continue
		}
		swept, err := s.sweepOnce(ctx, resource, expired, leaked, retention)
		if err != nil {
			return nil, nil, -1, err
		}
		for _, w := range swept {
			if w.fresh {
				fresh++
			}
			out = append(out, quota.LeakedSession{
				ResourceName: resource, SessionID: w.id, ClientID: w.client, PeriodStart: ms(w.period),
				Granted: w.granted, EndTime: ms(w.end), Fresh: w.fresh,
			})
		}
		if len(listed) < want {
			break // the lease index had no more
		}
	}
	return out, orphans, next, nil
}

// periodFields are what sweepOnce reads of a session: its period, from
// its own field or its packed record (record.go).
var periodFields = []string{"period", recordField}

// sweepOnce reads the expired candidates' periods and runs sweep.lua.
func (s *Store) sweepOnce(ctx context.Context, resource string, expired, leaked []string, retention time.Duration) ([]sweptReply, error) {
	periods := make([]*redis.SliceCmd, len(expired))
	if len(expired) > 0 {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range expired {
				periods[i] = p.HMGet(ctx, sessionKey(resource, id), periodFields...)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, wrap("sweep", err)
		}
	}
	keys := make([]string, 0, 2+len(expired)+len(leaked)+2)
	keys = append(keys, leasesKey(resource), leakedKey(resource))
	args := make([]any, 0, 2+3*len(expired)+len(leaked))
	args = append(args, itoa(retention.Milliseconds()), len(expired))
	balanceAt := map[string]int{} // period → its balance key's index in KEYS (1-based)
	var balances []string
	for i, id := range expired {
		keys = append(keys, sessionKey(resource, id))
		v := periods[i].Val()
		fromRecord(periodFields, v)
		per, idx := "", 0 // "": no session (an index entry left behind)
		if len(v) > 0 {
			per, _ = v[0].(string)
		}
		if per != "" {
			if balanceAt[per] == 0 {
				balances = append(balances, per)
				balanceAt[per] = 2 + len(expired) + len(leaked) + len(balances)
			}
			idx = balanceAt[per]
		}
		args = append(args, id, per, idx)
	}
	for _, id := range leaked {
		keys = append(keys, sessionKey(resource, id))
		args = append(args, id)
	}
	for _, per := range balances {
		keys = append(keys, prefix(resource)+"b:"+per)
	}
	v, err := s.run(ctx, sweepScript, keys, args...)
	if err != nil {
		return nil, wrap("sweep", err)
	}
	swept, err := decodeSweep(v)
	if err != nil {
		return nil, wrap("sweep", err)
	}
	return swept, nil
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

// sessionFields are read by Sessions, in this order; the last, a packed
// session's record (record.go), fills in the fields it holds.
var sessionFields = []string{"status", "client", "granted", "actual", "refunded", "overage", "period", "start", "end", "leaked", "amount", "min", "fo", "line", "fod", recordField}

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
		fromRecord(sessionFields, v)
		st, ok, err := decodeSession(v)
		if err != nil {
			return nil, wrap("sessions", fmt.Errorf("session %s: %w", ids[i], err))
		}
		if ok {
			out[ids[i]] = st
		}
	}
	return out, nil
}

// RestoreSessions runs seed.lua in its sessions-only mode, in chunks.
func (s *Store) RestoreSessions(ctx context.Context, resource string, open []quota.UsageRecord, lease time.Duration) error {
	for len(open) > 0 {
		chunk := open[:min(len(open), seedChunk)]
		open = open[len(chunk):]
		// Sessions only: the balance key (of period 0) is declared, not touched.
		v, err := s.run(ctx, seedScript, seedKeys(resource, 0, quota.Fence{}, chunk),
			seedArgs(0, quota.PeriodTotals{}, 0, "0", lease, quota.Fence{}, "", 0, chunk)...)
		if err == nil {
			_, err = flag("seed.lua", v, seedWrote)
		}
		if err != nil {
			return wrap("restore sessions", err)
		}
	}
	return nil
}

// CatchUp runs seed.lua in its catch-up mode, in chunks, fenced by f: open
// rows of the period per read after its balance was rebuilt, each counted
// once if the balance does not count it yet (issue 11, G7). A balance
// without an epoch (seeded before epochs) is left alone. See quota.Seeder.
func (s *Store) CatchUp(ctx context.Context, f quota.Fence, resource string, per quota.Period, open []quota.UsageRecord, lease time.Duration) error {
	for len(open) > 0 {
		chunk := open[:min(len(open), seedChunk)]
		open = open[len(chunk):]
		v, err := s.run(ctx, seedScript, seedKeys(resource, per.ID(), f, chunk),
			seedArgs(0, quota.PeriodTotals{}, 0, "c", lease, f, "", per.ID(), chunk)...)
		if err != nil {
			return wrap("catch up", err)
		}
		c, err := flag("seed.lua", v, seedAlreadyThere, seedWrote, seedFenced)
		if err != nil {
			return wrap("catch up", err)
		}
		switch c {
		case seedFenced:
			return fmt.Errorf("catch up %s: lock %s: %w", resource, f.Name, quota.ErrLockLost)
		case seedAlreadyThere:
			return nil // no epoch: nothing to catch up with
		}
	}
	return nil
}

// RestoreLeaked runs seed.lua (sessions only) for one LEAKED ledger row. See
// quota.Seeder.
func (s *Store) RestoreLeaked(ctx context.Context, resource string, row quota.UsageRecord, retention time.Duration) error {
	row.Status = quota.StatusLeaked
	recs := []quota.UsageRecord{row}
	v, err := s.run(ctx, seedScript, seedKeys(resource, 0, quota.Fence{}, recs),
		seedArgs(0, quota.PeriodTotals{}, 0, "0", retention, quota.Fence{}, "", 0, recs)...)
	if err == nil {
		_, err = flag("seed.lua", v, seedWrote)
	}
	return wrap("restore leaked session", err)
}

// adjustMarkTTL is how long adjust.lua remembers a call it applied: far
// longer than go-redis may take to send it again (its retries, each within
// the client's timeouts).
const adjustMarkTTL = 10 * time.Minute

// Adjust runs adjust.lua with a token of its own, so that the correction is
// applied once even when go-redis sends the call again after a lost reply
// (known gap G8), only while the lock f holds f.Token (issue 11 §3.4:
// a reconciler cut off past its lock's TTL must not write a drift measured
// before another one took over), only on the balance a.Seen (when
// a.Seen.Exists), keeping the reservations live sessions of a.Unrecorded
// hold (issue 22 §1; see quota.Adjustment). Errors: quota.ErrLockLost
// (fenced: nothing written), quota.ErrNegativeBalance (the correction would
// leave charged or reserved below zero: nothing written), backend errors.
func (s *Store) Adjust(ctx context.Context, resource string, per quota.Period, a quota.Adjustment, f quota.Fence) (quota.AdjustOutcome, error) {
	keys := make([]string, 0, 3+len(a.Unrecorded))
	keys = append(keys, balanceKey(resource, per.ID()), adjustKey(resource, randomToken()), lockKey(resource, f.Name))
	for _, id := range a.Unrecorded {
		keys = append(keys, sessionKey(resource, id))
	}
	seenC, seenR := "", ""
	if a.Seen.Exists {
		seenC, seenR = itoa(a.Seen.Charged), itoa(a.Seen.Reserved)
	}
	v, err := s.run(ctx, adjustScript, keys, itoa(a.Charged), itoa(a.Reserved), itoa(adjustMarkTTL.Milliseconds()), f.Token,
		seenC, seenR, itoa(per.ID()))
	if err != nil {
		return 0, wrap("adjust", err)
	}
	c, err := flag("adjust.lua", v, adjustNoBalance, adjustApplied, adjustRepeated, adjustFenced, adjustMoved, adjustHeld)
	if err != nil {
		return 0, wrap("adjust", err)
	}
	switch c {
	case adjustFenced:
		return 0, fmt.Errorf("adjust %s: lock %s: %w", resource, f.Name, quota.ErrLockLost)
	case adjustNoBalance:
		return quota.AdjustNoBalance, nil
	case adjustMoved:
		return quota.AdjustMoved, nil
	case adjustHeld:
		return quota.AdjustHeld, nil
	}
	return quota.AdjustApplied, nil
}
