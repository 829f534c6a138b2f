//go:build !mutation

// Left out of the mutation run like fuzz_test.go (see there): the model
// steps of FuzzApplyFinishSequences.

package quota_test

import (
	"context"
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

func (env *seqEnv) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := env.store.DB().Get(&n, `SELECT COUNT(*) FROM quota_usage`); err != nil {
		t.Fatalf("count ledger rows: %v", err)
	}
	return n
}

// checkBalance compares one resource's status and ledger with the model.
func (env *seqEnv) checkBalance(ctx context.Context, m *seqModel, res int, fail func(string, ...any)) {
	name := seqResources[res]
	st, err := env.svc.Status(ctx, name)
	if err != nil {
		fail("status %s: %v", name, err)
	}
	c := m.charged[res]
	if !near(st.Used, c, c) || st.Reserved != m.reserved[res] || !near(st.Remaining, m.remaining(res), c) ||
		st.Policy.TotalLimit != m.limit[res] || st.ActiveSessions != m.active(res) {
		fail("status of %s: limit %d used %d reserved %d remaining %d active %d; model: limit %d used %d reserved %d remaining %d active %d",
			name, st.Policy.TotalLimit, st.Used, st.Reserved, st.Remaining, st.ActiveSessions,
			m.limit[res], m.charged[res], m.reserved[res], m.remaining(res), m.active(res))
	}
	tot, err := env.store.PeriodTotals(ctx, name, st.Period.Start)
	if err != nil {
		fail("period totals %s: %v", name, err)
	}
	if tot.Charged != c || !near(st.Used, tot.Charged, c) || tot.Reserved != st.Reserved {
		fail("ledger of %s: charged %d reserved %d; Redis: used %d reserved %d", name, tot.Charged, tot.Reserved, st.Used, st.Reserved)
	}
}

// errClass names the documented error an operation returned; anything else
// fails the test.
func errClass(err error) string {
	var ve *quota.ValidationError
	var na *quota.NotActiveError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ve):
		return "invalid"
	case errors.As(err, &na):
		return "not active " + string(na.Status)
	case errors.Is(err, quota.ErrSessionNotFound):
		return "not found"
	case errors.Is(err, quota.ErrSessionConflict):
		return "conflict"
	}
	return "undocumented: " + err.Error()
}

func validAmount(v, lo int64) bool { return v >= lo && v <= quota.MaxAmount }

// step runs one operation, checks its answer against the model and updates
// the model. It reports whether the operation should have changed state.
func (env *seqEnv) step(ctx context.Context, m *seqModel, o seqOp, fail func(string, ...any)) bool {
	name := seqResources[o.res]
	want := func(got error, class string) {
		if c := errClass(got); c != class {
			fail("%s: got error %q (%v), want %q", o, c, got, class)
		}
	}
	switch o.kind {
	case opStatus:
		return false

	case opLimit:
		_, _, err := env.svc.PutPolicy(ctx, seqPolicy(o.res, o.amount))
		if !validAmount(o.amount, 1) {
			want(err, "invalid")
			return false
		}
		want(err, "")
		m.limit[o.res] = o.amount
		return true

	case opApply:
		resp, err := env.svc.Apply(ctx, quota.ApplyRequest{ResourceName: name, Amount: o.amount, MinAmount: o.min, ClientID: o.client, SessionID: o.sid})
		if !validAmount(o.amount, 1) || !validAmount(o.min, 0) || o.min > o.amount {
			want(err, "invalid")
			return false
		}
		rem := m.remaining(o.res)
		grant := o.amount
		if rem < o.amount {
			grant = 0
			if o.min > 0 && rem >= o.min {
				grant = rem
			}
		}
		k := sKey{o.res, o.client, o.sid}
		s := m.sessions[k]
		// Without a client there is no scope: one namespace, as before, where
		// another's id is a conflict (on the other resource too, exhausted
		// or not: a refused apply of an id the ledger holds is a repeat).
		b, held := m.bare[o.sid]
		switch {
		case o.sid != "" && o.client == "" && held && b != k:
			want(err, "conflict")
			return false
		case o.sid != "" && s != nil:
			if s.amount != o.amount || s.min != o.min || s.client != o.client {
				want(err, "conflict")
				return false
			}
			want(err, "")
			first := s.firstApply
			if resp.SessionID != o.sid || !resp.Replayed || resp.Refused() || resp.Granted != first.Granted ||
				resp.HeartbeatIntervalSeconds != first.HeartbeatIntervalSeconds {
				fail("%s: replay answered %+v, first answer %+v", o, resp, first)
			}
			if resp.Remaining != first.Remaining && !(knownReplayRemaining && s.finishedAfter) {
				fail("%s: replay says %d remain, the first answer said %d", o, resp.Remaining, first.Remaining)
			}
			if !resp.LeaseExpiresAt.Equal(s.lease) {
				fail("%s: replay's lease %v, the session's lease is %v", o, resp.LeaseExpiresAt, s.lease)
			}
			return false
		case grant == 0:
			// Exhausted, also for an id another client or resource holds
			// (a client's id is its own).
			want(err, "")
			if !resp.Refused() || resp.Granted != 0 || !near(resp.Remaining, rem, m.charged[o.res]) || resp.Replayed {
				fail("%s: want exhausted with %d remaining, got %+v", o, rem, resp)
			}
			return false
		}
		want(err, "")
		if resp.Refused() || resp.Replayed || resp.Granted != grant || resp.Remaining != rem-grant ||
			(o.sid != "" && resp.SessionID != o.sid) || resp.SessionID == "" {
			fail("%s: want a grant of %d leaving %d, got %+v", o, grant, rem-grant, resp)
		}
		k = sKey{o.res, o.client, resp.SessionID}
		if _, taken := m.bare[resp.SessionID]; taken && o.sid == "" {
			fail("%s: server-made session id %s is taken", o, resp.SessionID)
		}
		if _, taken := m.bare[resp.SessionID]; !taken {
			m.bare[resp.SessionID] = k
		}
		m.reserved[o.res] += grant
		m.sessions[k] = &mSession{res: o.res, client: o.client, amount: o.amount, min: o.min,
			granted: grant, firstApply: resp, lease: resp.LeaseExpiresAt}
		return true

	case opHeartbeat:
		resp, err := env.svc.Heartbeat(ctx, name, o.sid, o.client)
		s := m.find(o.res, o.client, o.sid)
		switch {
		case s == nil:
			want(err, "not found")
		case s.finished:
			want(err, "not active FINISHED")
		default:
			want(err, "")
			if resp.Status != quota.StatusUsing || resp.SessionID != o.sid || resp.LeaseExpiresAt.Before(s.lease) {
				fail("%s: answered %+v; lease was %v", o, resp, s.lease)
			}
			s.lease = resp.LeaseExpiresAt
			return true // the lease moved
		}
		return false

	case opFinish:
		resp, err := env.svc.Finish(ctx, quota.FinishRequest{ResourceName: name, SessionID: o.sid, ClientID: o.client, Actual: o.actual})
		if !validAmount(o.actual, 0) {
			want(err, "invalid")
			return false
		}
		s := m.find(o.res, o.client, o.sid)
		switch {
		case s == nil:
			want(err, "not found")
			return false
		case s.finished && s.actual != o.actual:
			want(err, "conflict")
			return false
		case s.finished:
			want(err, "")
			first := s.firstFinish
			first.Replayed = true
			if resp != first {
				fail("%s: replay answered %+v, first answer %+v", o, resp, s.firstFinish)
			}
			return false
		}
		want(err, "")
		m.reserved[o.res] -= s.granted
		m.charged[o.res] += o.actual
		exp := quota.FinishResponse{SessionID: o.sid, Granted: s.granted, Charged: o.actual,
			Refunded: max(0, s.granted-o.actual), Overage: max(0, o.actual-s.granted),
			Remaining: m.remaining(o.res), QuotaType: quota.TypeTokens}
		if near(resp.Remaining, exp.Remaining, m.charged[o.res]) {
			exp.Remaining = resp.Remaining
		}
		if resp != exp {
			fail("%s: answered %+v, want %+v", o, resp, exp)
		}
		s.finished, s.actual, s.firstFinish, s.finishedAfter = true, o.actual, resp, true
		return true
	}
	panic("unknown op")
}

// knownReplayRemaining: a known bug, found by this fuzzer (corpus entry
// crasher_replay_after_overage_finish). An apply replayed after its session
// finished answers the remaining left by the finish, not the first apply's
// answer: finish.lua overwrites the session hash's "remaining" field, which
// apply.lua's replay branch reads. While true, a replay after a finish is
// not held to the first answer's remaining; set to false once finish.lua
// keeps its remaining in a field of its own.
const knownReplayRemaining = false

// knownLuaPrecision: a known bug, found by this fuzzer (seed big_numbers).
// The Lua scripts read a period's charged and reserved with tonumber, a
// double: once a period's charged passes 2^53−1 (only overages can take it
// there, as limits and grants stay below), balance.lua, finish.lua and
// apply.lua report usedAmount and remainingQuota rounded (off by 1 at
// 3·2^52−1), while HINCRBY keeps the exact value and the ledger sums it
// exactly; reconciliation then sees a drift that is not there. Grants are
// not affected (remaining is far below zero by then). While true, amounts of
// a resource whose charged is past 2^53−1 are compared within the rounding
// error; set to false once the scripts return exact integers.
const knownLuaPrecision = false

// inexact reports whether got may differ from want by Lua rounding, and
// by how much: charged is the resource's total charged in the model.
func inexact(charged int64) (bool, int64) {
	if !knownLuaPrecision || charged <= quota.MaxAmount {
		return false, 0
	}
	return true, max(2, charged>>51)
}

// near compares an amount derived from charged with what the model wants.
func near(got, want, charged int64) bool {
	if got == want {
		return true
	}
	ok, tol := inexact(charged)
	return ok && got-want <= tol && want-got <= tol
}
