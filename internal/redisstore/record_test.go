package redisstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestSplitRecord(t *testing.T) {
	for _, c := range []struct {
		r    string
		ok   bool
		want [len(recordFields)]string
	}{
		{"10|0|10|90|1700|1600", true, [6]string{"10", "0", "10", "90", "1700", "1600"}},
		{"|||||", true, [6]string{}},
		{"10|0|10|90|1700", false, [6]string{}},
		{"10|0|10|90|1700|1600|x", false, [6]string{}},
		{"", false, [6]string{}},
	} {
		got, ok := splitRecord(c.r)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("splitRecord(%q) = %q, %v; want %q, %v", c.r, got, ok, c.want, c.ok)
		}
	}
}

func TestFromRecordKeepsTheHashsOwnFields(t *testing.T) {
	fields := []string{"status", "granted", "start", "amount", "line", "client", recordField}
	vals := []any{"USING", nil, nil, "12", nil, "c", "10|0|8|92|1700|1600"}
	fromRecord(fields, vals)
	want := []any{"USING", "8", "1700", "12", nil, "c", "10|0|8|92|1700|1600"}
	if fmt.Sprint(vals) != fmt.Sprint(want) {
		t.Fatalf("fromRecord: %q, want %q (an own amount wins, line and client are not in the record)", vals, want)
	}
	full := []any{"USING", nil, nil, nil, nil, nil, nil} // a full-form session: no record
	fromRecord(fields, full)
	if fmt.Sprint(full) != fmt.Sprint([]any{"USING", nil, nil, nil, nil, nil, nil}) {
		t.Fatalf("fromRecord without a record changed %q", full)
	}
	bad := []any{"USING", nil, nil, nil, nil, nil, "not|a|record"}
	fromRecord(fields, bad)
	if bad[1] != nil || bad[2] != nil {
		t.Fatalf("fromRecord took values from a malformed record: %q", bad)
	}
	h := unpackSession(map[string]string{"status": "USING", "lease": "5", "client": "c", "att": "a", "bep": "e",
		"amount": "12", recordField: "10|0|8|92|1700|1600"})
	if len(h) != 11 || h["amount"] != "12" || h["granted"] != "8" || h["period"] != "1600" || h[recordField] != "" {
		t.Fatalf("unpackSession: %v", h)
	}
}

// TestPackedSessionIsReadByEveryScript applies sessions as POST /quota/apply
// does (a scoped id and an attempt: apply.lua's fast path), checks that
// they are stored packed (six fields, the record in a listpack-encoded hash) or,
// with HashSessions, in the full form, and drives every script that reads
// a session over them: replay, heartbeat, finish, give-back by attempt,
// sweep, and Sessions, with the same answers for both forms.
func TestPackedSessionIsReadByEveryScript(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		for _, hash := range []bool{false, true} {
			e.res = newResource(t, e.rdb)
			e.s.HashSessions = hash
			per := e.current(t)
			e.seed(t, per, 1000, quota.PeriodTotals{})
			apply := func(id string, amount int64, lease time.Duration) quota.ApplyCmd {
				c := e.cmd(id, amount, 0, per)
				c.OtherSessionID = quota.ScopedSessionID(e.res, c.ClientID, id)
				c.Attempt = "att-" + id
				c.Lease = lease
				e.grant(t, c, amount)
				raw, err := e.rdb.HGetAll(ctxT(t), sessionKey(e.res, id)).Result()
				if _, rec := raw[recordField]; err != nil || rec == hash || (!hash && len(raw) != 6) || (hash && len(raw) != 11) {
					t.Fatalf("hash %v: session %s stored as %v (%v)", hash, id, raw, err)
				}
				if e.mr != nil {
					return c // miniredis has no OBJECT ENCODING
				}
				if enc, err := e.rdb.ObjectEncoding(ctxT(t), sessionKey(e.res, id)).Result(); err != nil || enc != "listpack" {
					t.Fatalf("hash %v: session %s is a %q (%v), want a listpack (a record within hash-max-listpack-value)", hash, id, enc, err)
				}
				return c
			}
			a := apply("a", 100, time.Minute)
			apply("b", 50, time.Minute)
			apply("c", 30, time.Minute)
			apply("d", 20, time.Millisecond)

			// A replay by another attempt answers the first grant and takes the
			// attempt off: a give-back keyed by the first attempt then leaves the
			// session alone.
			r := a
			r.Attempt = "retry"
			if got := e.apply(t, r); got.Outcome != quota.ApplyReplayed || got.Granted != 100 {
				t.Fatalf("hash %v: replay of a: %+v", hash, got)
			}
			if got, err := e.s.Compensate(ctxT(t), e.res, "a", "att-a"); err != nil || got != quota.CompensateNotItsOwn {
				t.Fatalf("hash %v: compensate a after another attempt's replay: %v %v, want not its own", hash, got, err)
			}
			// b's own attempt gives it back.
			if got, err := e.s.Compensate(ctxT(t), e.res, "b", "att-b"); err != nil || got != quota.CompensateGivenBack {
				t.Fatalf("hash %v: compensate b: %v %v, want given back", hash, got, err)
			}
			wantBalance(t, e.balance(t, per), 1000, 0, 150)

			// Heartbeat checks the client the session holds.
			if _, err := e.s.Heartbeat(ctxT(t), e.res, "c", "client-2", time.Minute); !errors.Is(err, quota.ErrSessionNotFound) {
				t.Fatalf("hash %v: heartbeat of c by another client: %v, want not found", hash, err)
			}
			if exp, err := e.s.Heartbeat(ctxT(t), e.res, "c", "client-1", time.Hour); err != nil || exp.Before(e.now(t).Add(50*time.Minute)) {
				t.Fatalf("hash %v: heartbeat of c: %v %v", hash, exp, err)
			}

			states, err := e.s.Sessions(ctxT(t), e.res, []string{"a", "b", "c"})
			if err != nil {
				t.Fatal(err)
			}
			if s := states["c"]; s.Status != quota.StatusUsing || s.ClientID != "client-1" || s.Granted != 30 || s.ApplyAmount != 30 ||
				!s.PeriodStart.Equal(per.Start) || s.StartTime.IsZero() {
				t.Fatalf("hash %v: Sessions c: %+v", hash, s)
			}
			if s := states["b"]; s.Status != quota.StatusCancelled || s.Granted != 50 {
				t.Fatalf("hash %v: Sessions b: %+v", hash, s)
			}

			// Finish with the client's id: an overage past the grant.
			f, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "c", ClientID: "client-1", Actual: 45, Retention: time.Hour})
			if err != nil || f.Granted != 30 || f.Overage != 15 || f.ClientID != "client-1" || !f.PeriodStart.Equal(per.Start) || f.StartTime.IsZero() {
				t.Fatalf("hash %v: finish c: %+v %v", hash, f, err)
			}
			wantBalance(t, e.balance(t, per), 1000, 45, 120)

			// d's lease has run out: swept, charged its grant.
			l, _ := e.waitSwept(t, "d")
			if l.Granted != 20 || !l.PeriodStart.Equal(per.Start) {
				t.Fatalf("hash %v: swept d: %+v", hash, l)
			}
			wantBalance(t, e.balance(t, per), 1000, 65, 100)
			if s := e.session(t, "d"); s["status"] != "LEAKED" || s["client"] != "client-1" || s["granted"] != "20" {
				t.Fatalf("hash %v: d after the sweep: %v", hash, s)
			}
		}
	})
}
