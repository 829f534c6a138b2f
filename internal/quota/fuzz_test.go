//go:build !mutation

// The mutation run (make mutation, scripts/mutation.sh) leaves this test
// out: it builds the adapters (miniredis, SQLite) into the package's test
// binary, which then recompiles them for every mutant (~25 s a mutant on
// the shared machine against ~3 s). The domain's rules are pinned by the
// fast tests on in-process fakes (stubs_test.go); this one still runs in
// make test.

package quota_test

// FuzzApplyFinishSequences (issue 3 §7) turns its input into a short
// sequence of operations on a real quota.Service (miniredis running the
// production Lua scripts, an in-memory SQLite ledger; fresh per input) and
// checks every answer and the state after every step against a small
// in-test model of the accounting rules.
//
// Seed corpus: testdata/fuzz/FuzzApplyFinishSequences. Fuzz with
//
//	go test -run='^$' -fuzz=FuzzApplyFinishSequences -fuzztime=60s ./internal/quota/
//
// Each input costs a few milliseconds per operation (Lua in miniredis,
// SQLite), and every package of the binary is coverage-instrumented, so
// expect hundreds of execs a second between pauses in which new inputs are
// minimized; -fuzzminimizetime=3s shortens those pauses.
//
// Two known bugs are tolerated while knownReplayRemaining and
// knownLuaPrecision (at the end of this file) are true; set them to false
// once fixed and the corpus entries that found them fail again.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// seqMaxOps bounds the operations one input makes.
const seqMaxOps = 40

// seqResources are the resources of a sequence; seqSlots the session ids it
// may name (slot 8 stands for "no id": the server makes one, or, for
// heartbeat and finish, an id nobody applied for).
var (
	seqResources = [2]string{"r0", "r1"}
	seqSlots     = [8]string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	seqClients   = [3]string{"", "c1", "c2"}
)

// seqSpecial are amounts picked by the top byte values: the edges of the
// 2^53−1 range and a few out of it (refused as invalid).
var seqSpecial = [16]int64{
	quota.MaxAmount, quota.MaxAmount - 1, quota.MaxAmount / 2, 1 << 52, 1 << 31, 1 << 32, 1e9, 1e12,
	1, 0, quota.MaxAmount + 1, -1, 1000, 50, 99, 100,
}

// seqAmount decodes one byte: mostly small amounts, so that limits run out.
func seqAmount(b byte) int64 {
	switch {
	case b < 200:
		return int64(b % 25)
	case b < 240:
		return int64(b-200) * 10
	}
	return seqSpecial[b-240]
}

type seqReader struct {
	b []byte
	i int
}

func (r *seqReader) more() bool { return r.i < len(r.b) }

func (r *seqReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

// seqKind is an operation of a sequence.
type seqKind int

const (
	opApply seqKind = iota + 1
	opHeartbeat
	opFinish
	opStatus
	opLimit
)

func (k seqKind) String() string {
	return [...]string{"", "apply", "heartbeat", "finish", "status", "limit"}[k]
}

// seqOp is one request; repeats run an earlier one again.
type seqOp struct {
	kind        seqKind
	res         int
	sid, client string
	amount, min int64 // apply; amount is the new limit for opLimit
	actual      int64 // finish
	repeat      bool
}

func (o seqOp) String() string {
	s := fmt.Sprintf("%s %s", o.kind, seqResources[o.res])
	switch o.kind {
	case opApply:
		s += fmt.Sprintf(" amount=%d min=%d sid=%q client=%q", o.amount, o.min, o.sid, o.client)
	case opHeartbeat:
		s += fmt.Sprintf(" sid=%q client=%q", o.sid, o.client)
	case opFinish:
		s += fmt.Sprintf(" sid=%q client=%q actual=%d", o.sid, o.client, o.actual)
	case opLimit:
		s += fmt.Sprintf(" limit=%d", o.amount)
	}
	if o.repeat {
		s = "repeat of " + s
	}
	return s
}

// decodeSeq reads the initial limits and up to seqMaxOps operations.
func decodeSeq(data []byte) (limits [2]int64, ops []seqOp) {
	r := &seqReader{b: data}
	for i := range limits {
		limits[i] = min(max(seqAmount(r.next()), 1), quota.MaxAmount)
	}
	for r.more() && len(ops) < seqMaxOps {
		code, arg := r.next(), r.next()
		o := seqOp{res: int(arg & 1), client: seqClients[int(arg>>5&3)%3]}
		slot := int(arg>>1&15) % 9
		if slot < 8 {
			o.sid = seqSlots[slot]
		}
		switch code % 8 {
		case 0, 1:
			o.kind = opApply
			o.amount = seqAmount(r.next())
			if arg&0x80 != 0 {
				o.min = seqAmount(r.next())
			}
		case 2:
			o.kind = opHeartbeat
			if o.sid == "" {
				o.sid = "never-applied"
			}
		case 3, 4:
			o.kind = opFinish
			o.actual = seqAmount(r.next())
			if o.sid == "" {
				o.sid = "never-applied"
			}
		case 5:
			if len(ops) == 0 {
				continue
			}
			o = ops[int(r.next())%len(ops)]
			o.repeat = true
		case 6:
			o.kind = opStatus
		case 7:
			o.kind = opLimit
			o.amount = seqAmount(r.next())
		}
		ops = append(ops, o)
	}
	return limits, ops
}

// seqEnv is one input's Service and stores.
type seqEnv struct {
	mr    *miniredis.Miniredis
	store *mysqlstore.Store
	svc   *quota.Service
}

func newSeqEnv(t *testing.T) *seqEnv {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := mysqlstore.OpenSQLite(context.Background(), ":memory:", mysqlstore.Options{BatchMaxWait: time.Microsecond})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	svc := quota.NewService(redisstore.New(rdb), st, st, &period.Scheduler{}, quota.Options{CatchUpAfter: -1})
	return &seqEnv{mr: mr, store: st, svc: svc}
}

func seqPolicy(res int, limit int64) quota.Policy {
	return quota.Policy{ResourceName: seqResources[res], QuotaType: quota.TypeTokens, TotalLimit: limit}
}

// attemptField is a session's 'att' line in a miniredis dump.
var attemptField = regexp.MustCompile(`(?m)^\s+att: ".*"\n`)

// withoutAttempts drops the sessions' attempt keys from a dump: a replay by
// another request takes the first attempt's key off its session (apply.lua,
// issue 11 §3.1), bookkeeping that decides nothing the model holds.
func withoutAttempts(dump string) string { return attemptField.ReplaceAllString(dump, "") }

// withoutTombstones drops CANCELLED sessions from a dump: a tombstone is no
// session (apply.lua takes its id afresh), and an apply refused as a
// conflict may replace one. The bare id's tombstone is left by an apply
// whose id's ledger row was another client's, made again under its scoped
// id (quota scope.go).
func withoutTombstones(dump string) string {
	var out, entry []string
	flush := func() {
		if !slices.Contains(entry, `   status: "CANCELLED"`) {
			out = append(out, entry...)
		}
		entry = nil
	}
	for _, l := range strings.Split(strings.TrimRight(dump, "\n"), "\n") {
		if strings.HasPrefix(l, "- ") {
			flush()
		}
		entry = append(entry, l)
	}
	flush()
	return strings.Join(out, "\n")
}

// FuzzApplyFinishSequences checks, after every step: the answer (or error)
// is the model's; reserved is the sum of the grants of USING sessions, used
// the sum of the actuals of finished ones, remaining limit − used −
// reserved, activeSessions the USING count; the ledger's PeriodTotals equal
// the Redis balance; a refused request changed neither Redis nor the
// ledger; repeats return the first answer and never charge twice; errors
// are only the documented sentinels (never ErrUnavailable).
func FuzzApplyFinishSequences(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		limits, ops := decodeSeq(data)
		env := newSeqEnv(t)
		ctx := t.Context()
		m := &seqModel{limit: limits, sessions: map[sKey]*mSession{}, bare: map[string]sKey{}}
		for i, l := range limits {
			if _, _, err := env.svc.PutPolicy(ctx, seqPolicy(i, l)); err != nil {
				t.Fatalf("policy %s: %v", seqResources[i], err)
			}
		}
		var touched [2]bool
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s\nafter:\n  %s", fmt.Sprintf(format, args...), strings.Join(log, "\n  "))
		}
		for _, o := range ops {
			log = append(log, o.String())
			seeded := touched[o.res]
			var redisBefore string
			var rowsBefore int
			if seeded {
				redisBefore, rowsBefore = withoutTombstones(withoutAttempts(env.mr.Dump())), env.rows(t)
			}
			changed := env.step(ctx, m, o, fail)
			touched[o.res] = true
			if !changed && seeded {
				if after := withoutTombstones(withoutAttempts(env.mr.Dump())); after != redisBefore {
					fail("%s changed nothing in the model, but Redis went from\n%s\nto\n%s", o, redisBefore, after)
				}
				if n := env.rows(t); n != rowsBefore {
					fail("%s changed nothing in the model, but the ledger went from %d to %d rows", o, rowsBefore, n)
				}
			}
			// An operation only touches its own resource; the other one
			// is checked on a status operation and at the end.
			for res := range seqResources {
				if touched[res] && (res == o.res || o.kind == opStatus) {
					env.checkBalance(ctx, m, res, fail)
				}
			}
		}
		log = append(log, "(end)")
		for res := range seqResources {
			if touched[res] {
				env.checkBalance(ctx, m, res, fail)
			}
		}
	})
}

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
