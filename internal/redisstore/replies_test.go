package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Every decoder refuses a reply its script's contract does not allow, with
// errMalformedReply, instead of reading zeros.
func TestDecodersRefuseMalformedReplies(t *testing.T) {
	t.Parallel()
	// apply.lua: 18 elements (session.lib's answer).
	ok18 := []any{int64(1), int64(10), int64(90), int64(5), int64(4), int64(3), int64(2), "100", "0", "10", "", int64(0),
		int64(0), int64(0), int64(0), int64(0), int64(0), ""}
	with := func(i int, v any) []any {
		r := append([]any{}, ok18...)
		r[i] = v
		return r
	}
	finish := func(mod func([]any)) []any {
		r := []any{int64(1), int64(40), int64(15), int64(25), int64(0), int64(0), int64(7), int64(8), int64(9),
			int64(0), "client-1", "100", "15", "0"}
		mod(r)
		return r
	}
	cases := []struct {
		name string
		dec  func(v any) error
		v    any
	}{
		{"apply not an array", func(v any) error { _, err := decodeApply(v); return err }, int64(1)},
		{"apply short", func(v any) error { _, err := decodeApply(v); return err }, ok18[:17]},
		{"apply 20 elements", func(v any) error { _, err := decodeApply(v); return err }, append(append([]any{}, ok18...), "r|a|0|b=1", "1")},
		{"apply move note not a string", func(v any) error { _, err := decodeApply(v); return err }, append(append([]any{}, ok18...), int64(1))},
		{"apply move note of a replay", func(v any) error { _, err := decodeApply(v); return err }, append(with(0, int64(2)), "r|a|0|b=1")},
		{"apply empty move note", func(v any) error { _, err := decodeApply(v); return err }, append(append([]any{}, ok18...), "")},
		{"apply short but refused", func(v any) error { _, err := decodeApply(v); return err }, []any{int64(3), int64(0), int64(5), int64(1)}},
		{"apply short with text", func(v any) error { _, err := decodeApply(v); return err }, []any{int64(1), "x", int64(5), int64(1)}},
		{"apply unknown code", func(v any) error { _, err := decodeApply(v); return err }, with(0, int64(7))},
		{"apply text", func(v any) error { _, err := decodeApply(v); return err }, with(2, "x")},
		{"apply refused without any remaining", func(v any) error { _, err := decodeApply(v); return err },
			func() []any { r := with(0, int64(3)); r[2], r[7], r[8], r[9] = "", "", "", ""; return r }()},
		{"apply float", func(v any) error { _, err := decodeApply(v); return err }, with(6, "1.5")},
		{"apply grant list not a string", func(v any) error { _, err := decodeApply(v); return err }, with(17, int64(1))},
		{"apply bad charged", func(v any) error { _, err := decodeApply(v); return err }, with(8, "1e3")},
		{"heartbeat empty", func(v any) error { _, err := decodeHeartbeat(v); return err }, []any{}},
		{"heartbeat renewed without lease", func(v any) error { _, err := decodeHeartbeat(v); return err }, []any{int64(2)}},
		{"heartbeat status not a string", func(v any) error { _, err := decodeHeartbeat(v); return err }, []any{int64(1), int64(3)}},
		{"heartbeat not found with more", func(v any) error { _, err := decodeHeartbeat(v); return err }, []any{int64(0), int64(3)}},
		{"finish short", func(v any) error { _, err := decodeFinish(v); return err }, finish(func(r []any) {})[:13]},
		{"finish bad leaked", func(v any) error { _, err := decodeFinish(v); return err }, finish(func(r []any) { r[9] = int64(2) })},
		{"finish client not a string", func(v any) error { _, err := decodeFinish(v); return err }, finish(func(r []any) { r[10] = int64(1) })},
		{"finish bad charged", func(v any) error { _, err := decodeFinish(v); return err }, finish(func(r []any) { r[12] = "1e3" })},
		{"finish other period without it", func(v any) error { _, err := decodeFinish(v); return err }, []any{int64(8)}},
		{"finish conflict with more", func(v any) error { _, err := decodeFinish(v); return err }, []any{int64(6), int64(1)}},
		{"cancel bare integer", func(v any) error { _, _, err := decodeCancel(v); return err }, int64(1)},
		{"cancel other period without it", func(v any) error { _, _, err := decodeCancel(v); return err }, []any{int64(2)}},
		{"cancel unknown", func(v any) error { _, _, err := decodeCancel(v); return err }, []any{int64(5)}},
		{"balance exists 2", func(v any) error { _, err := decodeBalance(v); return err }, []any{int64(2), "1", "0", "0", int64(0), "", ""}},
		{"balance short", func(v any) error { _, err := decodeBalance(v); return err }, []any{int64(1), "1", "0", "0", int64(0)}},
		{"flag out of range", func(v any) error { _, err := flag("lock.lua", v, lockHeldByOther, lockHeld); return err }, int64(2)},
		{"flag not an integer", func(v any) error { _, err := flag("adjust.lua", v, adjustNoBalance, adjustApplied); return err }, "OK"},
		{"seed later chunk 0", func(v any) error { _, err := flag("seed.lua", v, seedWrote); return err }, int64(0)},
		{"expired one list", func(v any) error { _, _, _, err := decodeExpired(v); return err }, []any{[]any{"a"}}},
		{"expired without next", func(v any) error { _, _, _, err := decodeExpired(v); return err }, []any{[]any{"a"}, []any{}}},
		{"expired id not a string", func(v any) error { _, _, _, err := decodeExpired(v); return err }, []any{[]any{int64(1)}, []any{}, int64(-1)}},
		{"sweep not 6-tuples", func(v any) error { _, err := decodeSweep(v); return err }, []any{"s", "1", "2", "3", "1"}},
		{"sweep bad fresh", func(v any) error { _, err := decodeSweep(v); return err }, []any{"s", "1", "2", "3", "2", "c"}},
		{"sweep bad granted", func(v any) error { _, err := decodeSweep(v); return err }, []any{"s", "1", "", "3", "1", "c"}},
		{"sweep client not a string", func(v any) error { _, err := decodeSweep(v); return err }, []any{"s", "1", "2", "3", "1", int64(7)}},
		{"session bad granted", func(v any) error {
			_, _, err := decodeSession([]any{"USING", "c", "ten", nil, nil, nil, "1", "2", nil, nil, "10", "0", nil, nil})
			return err
		}, nil},
		{"session short", func(v any) error { _, _, err := decodeSession([]any{"USING"}); return err }, nil},
	}
	for _, c := range cases {
		if err := c.dec(c.v); !errors.Is(err, errMalformedReply) {
			t.Errorf("%s: err = %v, want errMalformedReply", c.name, err)
		}
	}
	// And reads what is well formed.
	if a, err := decodeApply(ok18); err != nil || a.code != applyGranted || a.remaining != 90 || !a.ownRemaining || a.periodRemaining() != 90 {
		t.Errorf("apply %+v, %v", a, err)
	}
	if a, err := decodeApply([]any{int64(1), int64(4), int64(96), int64(1700)}); err != nil || !a.short || a.code != applyGranted ||
		a.granted != 4 || a.remaining != 96 || !a.ownRemaining || a.now != 1700 {
		t.Errorf("short apply %+v, %v", a, err)
	}
	if f, err := decodeFinish(finish(func([]any) {})); err != nil || f.code != finishSettled || f.charged != 15 || !f.hasBalance || f.client != "client-1" {
		t.Errorf("finish %+v, %v", f, err)
	}
	if f, err := decodeFinish(finish(func(r []any) { r[11], r[12], r[13] = "", "", "" })); err != nil || f.hasBalance {
		t.Errorf("finish without a balance %+v, %v", f, err)
	}
	if st, ok, err := decodeSession(make([]any, len(sessionFields))); err != nil || ok {
		t.Errorf("missing session: %+v %v %v", st, ok, err)
	}
}

// A malformed reply reaches the caller as an error that is not
// "unavailable" (a bug is not a reason to open the breaker or fail open).
// Not parallel: it swaps a package-level script while no other test runs.
func TestAMalformedScriptReplyFailsTheCall(t *testing.T) {
	e := newEnv(t, "miniredis")
	saved := heartbeatScript
	defer func() { heartbeatScript = saved }()
	heartbeatScript = redis.NewScript(`return {2, 'soon'}`)
	_, err := e.s.Heartbeat(ctxT(t), e.res, "s", "", time.Minute)
	if !errors.Is(err, errMalformedReply) || errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("err = %v, want a malformed reply, not unavailable", err)
	}
}

func TestAMalformedSessionFieldFailsSessions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("s", 10, 0, per), 10)
		if got, err := e.s.Sessions(ctxT(t), e.res, []string{"s", "gone"}); err != nil || len(got) != 1 || got["s"].Granted != 10 {
			t.Fatalf("Sessions = %+v, %v", got, err)
		}
		if err := e.rdb.HSet(ctxT(t), sessionKey(e.res, "s"), "granted", "ten").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Sessions(ctxT(t), e.res, []string{"s"}); !errors.Is(err, errMalformedReply) {
			t.Fatalf("Sessions of a session with granted=ten: %v, want a malformed reply", err)
		}
	})
}

// finish.lua and cancel.lua are given the balance key of the period the
// Store guesses (its latest grant's); a session of another period, or a
// Store with no guess yet, costs one more call and lands in the right
// period.
func TestFinishAndCancelFindTheSessionsPeriodWhateverTheGuess(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		p1 := e.current(t)
		p2 := quota.Period{Start: p1.End, End: p1.End.Add(time.Hour)}
		e.seed(t, p1, 100, quota.PeriodTotals{})
		e.seed(t, p2, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("a", 40, 0, p1), 40)
		e.grant(t, e.cmd("b", 30, 0, p1), 30)
		c := e.cmd("next", 20, 0, p2)
		c.FirstPeriod = true // p2 has not started on the store's clock
		e.grant(t, c, 20)
		if g := e.s.periodGuess(e.res); g != p2.ID() {
			t.Fatalf("guess %d, want p2 %d", g, p2.ID())
		}

		if f := e.finish(t, "a", 15); f.PeriodStart != p1.Start || f.Remaining != 100-15-30 {
			t.Fatalf("finish of a p1 session while guessing p2: %+v", f)
		}
		fresh := New(e.rdb) // no guess at all
		if err := fresh.Cancel(ctxT(t), e.res, "b"); err != nil {
			t.Fatal(err)
		}
		f, err := fresh.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "next", Actual: 5, Retention: time.Hour})
		if err != nil || f.PeriodStart != p2.Start || f.Refunded != 15 {
			t.Fatalf("finish on a Store without a guess: %+v, %v", f, err)
		}
		wantBalance(t, e.balance(t, p1), 100, 15, 0)
		wantBalance(t, e.balance(t, p2), 100, 5, 0)
	})
}
