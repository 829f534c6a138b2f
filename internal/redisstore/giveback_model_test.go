package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// gbSession is the model of one session: its state in Redis and its
// ledger row ("" = none yet).
type gbSession struct {
	granted int64
	status  string // USING, FINISHED, LEAKED or CANCELLED
	attempt string
	row     string // "", USING, FINISHED, LEAKED or CANCELLED
	actual  int64
	expired bool
	// counted: the balance counts its reservation (its epoch is the
	// balance's, seed.lua); a rebuild from a ledger without its row leaves
	// it uncounted, and its give-back then takes nothing.
	counted bool
}

// gbWorld is one period's balance driven through the scripts and through
// the model side by side: the balance's charged and reserved, every
// session and its ledger row.
type gbWorld struct {
	e                 *env
	rng               *rand.Rand
	per               quota.Period
	limit             int64
	charged, reserved int64
	s                 map[string]*gbSession
	ids               []string
	log               []string
	seen              map[string]int // outcomes the walk tried
}

// TestGiveBacksMatchTheModel (issue 22 §1) drives random applies,
// finishes, expiries, sweeps (the sweeper's, with its give-back of
// orphans), orphan give-backs (reconciliation's, and the sweeper's of the
// same session), drift corrections (reconciliation's, measured fresh or
// before another step), rebuilds of the balance from the ledger (a new
// epoch: live sessions without a row are no longer counted, and their
// give-backs take nothing) and corruptions of the balance through the
// scripts and through the Go model (giveback.go), interleaved with lost
// answers: an apply resent by go-redis, an apply answered 503 and
// compensated (the compensation sent twice), an apply whose instance died
// (a leftover with no ledger row), a finish, give-back or correction sent
// again. After every step the balance is the model's and never negative;
// after every fresh correction it is the ledger's plus what live
// unrecorded sessions hold; at the end, with everything settled, it is the
// ledger's.
func TestGiveBacksMatchTheModel(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		seen := map[string]int{}
		for seed := range uint64(3) {
			if seed > 0 {
				e.res = newResource(t, e.rdb)
			}
			per := e.current(t)
			w := &gbWorld{e: e, rng: rand.New(rand.NewPCG(seed, 22)), per: per, limit: 1000 + int64(seed)*500,
				s: map[string]*gbSession{}, seen: seen}
			e.seed(t, per, w.limit, quota.PeriodTotals{})
			for range 250 {
				w.step(t, true)
				w.check(t)
			}
			w.reconcile(t, false)
			w.drain(t)
			w.reconcile(t, false)
			if lc, _ := w.ledger(); w.reserved != 0 || w.charged != lc {
				w.fail(t, "settled: charged %d reserved %d, want the ledger's charged %d and nothing reserved", w.charged, w.reserved, lc)
			}
		}
		t.Logf("outcomes: %v", seen)
		for _, k := range []string{"adjust applied", "adjust held", "adjust moved", "give-back refused", "leaked", "orphan given back",
			"given back twice", "compensated", "rebuilt", "uncounted given back"} {
			if seen[k] == 0 {
				t.Errorf("the walk never reached %q: %v", k, seen)
			}
		}
	})
}

func (w *gbWorld) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s\nafter:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.log, "\n  "))
}

func (w *gbWorld) note(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// step makes one random step; reconcile false leaves corrections out (a
// step between a correction's measurement and its write).
func (w *gbWorld) step(t *testing.T, reconcile bool) {
	switch op := w.rng.IntN(21); {
	case op == 20:
		w.rebuild(t)
	case op < 6:
		w.apply(t)
	case op < 9:
		w.finish(t)
	case op < 11:
		w.expire(t)
	case op < 13:
		w.sweep(t)
	case op < 15:
		w.releaseOrphan(t)
	case op < 18 && reconcile:
		w.reconcile(t, w.rng.IntN(4) == 0)
	default:
		w.corrupt(t)
	}
}

// pick returns a random session id whose model session ok accepts, or "".
func (w *gbWorld) pick(ok func(s *gbSession) bool) string {
	var c []string
	for _, id := range w.ids {
		if ok(w.s[id]) {
			c = append(c, id)
		}
	}
	if len(c) == 0 {
		return ""
	}
	return c[w.rng.IntN(len(c))]
}

func (w *gbWorld) apply(t *testing.T) {
	id := fmt.Sprintf("s%d", len(w.ids))
	amount := 1 + w.rng.Int64N(w.limit/4)
	cmd := quota.ApplyCmd{ResourceName: w.e.res, SessionID: id, ClientID: "c", Amount: amount, Period: w.per,
		Lease: time.Hour, Attempt: "a-" + id}
	w.note("apply %s %d (remaining %d)", id, amount, w.limit-w.charged-w.reserved)
	r, err := w.e.s.Apply(ctxT(t), cmd)
	if w.limit-w.charged-w.reserved < amount {
		if err != nil || r.Outcome != quota.ApplyExhausted {
			w.fail(t, "apply %s: %+v %v, model: exhausted", id, r, err)
		}
		return
	}
	if err != nil || r.Outcome != quota.ApplyGranted || r.Granted != amount {
		w.fail(t, "apply %s: %+v %v, model: granted %d", id, r, err, amount)
	}
	w.reserved += amount
	s := &gbSession{granted: amount, status: "USING", attempt: cmd.Attempt, counted: true}
	w.s[id], w.ids = s, append(w.ids, id)
	switch w.rng.IntN(5) {
	case 0, 1: // recorded and answered
		s.row = "USING"
	case 2: // the answer lost: go-redis sends the script again; then recorded
		w.note("  resent")
		if r, err := w.e.s.Apply(ctxT(t), cmd); err != nil || r.Outcome != quota.ApplyReplayed {
			w.fail(t, "resent apply %s: %+v %v, model: replayed", id, r, err)
		}
		s.row = "USING"
	case 3: // answered 503: compensated, the compensation maybe sent twice
		w.seen["compensated"]++
		for range 1 + w.rng.IntN(2) {
			w.giveBack(t, id, s.attempt, "compensate")
		}
	default: // its instance died: a leftover, no ledger row, no compensation
		w.note("  leftover")
	}
}

// giveBack runs cancel.lua (Compensate with attempt, else Cancel) on id in
// the store and the model.
func (w *gbWorld) giveBack(t *testing.T, id, attempt, who string) {
	s := w.s[id]
	w.note("%s %s (status %s, reserved %d)", who, id, s.status, w.reserved)
	var err error
	out := quota.CompensateGivenBack
	if attempt != "" {
		out, err = w.e.s.Compensate(ctxT(t), w.e.res, id, attempt)
	} else {
		err = w.e.s.Cancel(ctxT(t), w.e.res, id)
	}
	switch {
	case s.status != "USING" || (attempt != "" && attempt != s.attempt):
		if err != nil || (attempt != "" && out != quota.CompensateNotItsOwn) {
			w.fail(t, "%s %s again: %v %v, model: nothing to give back", who, id, out, err)
		}
		w.seen["given back twice"]++
	case s.counted && takeDecision(w.reserved, s.granted) != nil:
		if !errors.Is(err, quota.ErrNegativeBalance) {
			w.fail(t, "%s %s: %v, model: refused, reserved %d < %d", who, id, err, w.reserved, s.granted)
		}
		w.seen["give-back refused"]++
	default:
		if err != nil || out != quota.CompensateGivenBack {
			w.fail(t, "%s %s: %v %v, model: given back", who, id, out, err)
		}
		if s.counted {
			w.reserved -= s.granted
		} else {
			w.seen["uncounted given back"]++
		}
		s.status = "CANCELLED"
		if s.row == "USING" {
			s.row = "CANCELLED" // as reconciliation settles the row of a tombstone
		}
	}
}

func (w *gbWorld) finish(t *testing.T) {
	if id := w.pick(func(s *gbSession) bool { return s.row != "" && (s.status == "USING" || s.status == "LEAKED") }); id != "" {
		w.finishID(t, id)
	}
}

// finishID finishes id, recorded, USING or LEAKED, in the store and the
// model, and now and then finishes it again (the answer lost).
func (w *gbWorld) finishID(t *testing.T, id string) {
	s := w.s[id]
	actual := w.rng.Int64N(s.granted*3/2 + 1)
	w.note("finish %s %d (%s, granted %d)", id, actual, s.status, s.granted)
	cmd := quota.FinishCmd{ResourceName: w.e.res, SessionID: id, Actual: actual, Retention: time.Hour}
	r, err := w.e.s.Finish(ctxT(t), cmd)
	var want error
	if s.status == "USING" {
		if s.counted {
			want = takeDecision(w.reserved, s.granted)
		}
	} else {
		want = takeDecision(w.charged, s.granted-actual)
	}
	if want != nil {
		if !errors.Is(err, quota.ErrNegativeBalance) {
			w.fail(t, "finish %s: %+v %v, model: refused", id, r, err)
		}
		w.seen["give-back refused"]++
		return
	}
	if err != nil || r.Replayed || r.Charged != actual || r.WasLeaked != (s.status == "LEAKED") {
		w.fail(t, "finish %s: %+v %v, model: finished", id, r, err)
	}
	if s.status == "USING" {
		if s.counted {
			w.reserved -= s.granted
		}
		w.charged += actual
	} else {
		w.charged += actual - s.granted
	}
	s.status, s.row, s.actual = "FINISHED", "FINISHED", actual
	if w.rng.IntN(3) == 0 { // the answer lost: the client finishes again
		if r, err := w.e.s.Finish(ctxT(t), cmd); err != nil || !r.Replayed {
			w.fail(t, "repeated finish %s: %+v %v, model: replayed", id, r, err)
		}
	}
}

func (w *gbWorld) expire(t *testing.T) {
	if id := w.pick(func(s *gbSession) bool { return s.status == "USING" && !s.expired }); id != "" {
		w.note("lease of %s ends", id)
		w.e.expire(t, id)
		w.s[id].expired = true
	}
}

// sweep is one sweeper pass: expired sessions with a ledger row become
// LEAKED (charged their grant), the others are orphans, given back.
func (w *gbWorld) sweep(t *testing.T) {
	var take int64
	want := map[string]bool{}
	for _, id := range w.ids {
		if s := w.s[id]; s.status == "USING" && s.expired && s.row == "USING" {
			if s.counted {
				take += s.granted
			}
			want[id] = true
		}
	}
	w.note("sweep (%d to leak, %d reserved)", len(want), w.reserved)
	leaks, orphans, err := w.e.s.SweepHeld(ctxT(t), w.e.res, 1000, time.Hour, func(ids []string) (map[string]bool, error) {
		h := map[string]bool{}
		for _, id := range ids {
			h[id] = w.s[id].row == "USING"
		}
		return h, nil
	})
	if take > 0 && takeDecision(w.reserved, take) != nil {
		if !errors.Is(err, quota.ErrNegativeBalance) {
			w.fail(t, "sweep: %+v %v, model: refused, reserved %d < %d", leaks, err, w.reserved, take)
		}
		w.seen["give-back refused"]++
		return
	}
	if err != nil || len(leaks) != len(want) {
		w.fail(t, "sweep: %+v %v, model: %v leaked", leaks, err, want)
	}
	acks := make([]string, 0, len(leaks))
	for _, l := range leaks {
		if !want[l.SessionID] || !l.Fresh || l.Granted != w.s[l.SessionID].granted {
			w.fail(t, "sweep leaked %+v, model: %v", l, want)
		}
		s := w.s[l.SessionID]
		if s.counted {
			w.reserved -= s.granted
		}
		w.charged += s.granted
		s.status, s.row = "LEAKED", "LEAKED"
		acks = append(acks, l.SessionID)
		w.seen["leaked"]++
	}
	if err := w.e.s.AckLeaks(ctxT(t), w.e.res, acks); err != nil {
		t.Fatal(err)
	}
	for _, id := range orphans {
		if s := w.s[id]; s.status != "USING" || !s.expired || s.row != "" {
			w.fail(t, "sweep: orphan %s is %+v", id, *s)
		}
		w.seen["orphan given back"]++
		for range 1 + w.rng.IntN(2) { // sent again after a lost answer
			w.giveBack(t, id, "", "sweeper's give-back of")
		}
	}
}

// releaseOrphan is reconciliation's give-back of a leftover past the grace
// period, and now and then the sweeper's of the same one.
func (w *gbWorld) releaseOrphan(t *testing.T) {
	if id := w.pick(func(s *gbSession) bool { return s.status == "USING" && s.row == "" }); id != "" {
		w.giveBack(t, id, "", "reconcile's give-back of")
		if w.rng.IntN(2) == 0 {
			w.giveBack(t, id, "", "sweeper's give-back of")
		}
	}
}

// corrupt moves the balance away from its sessions (a write lost or made
// twice), never below zero: by a random amount, or, as before issue 22
// §1's fix, by a live session's reservation taken a first time (a
// correction that did not keep it), followed by the session's own
// give-back.
func (w *gbWorld) corrupt(t *testing.T) {
	if id := w.pick(func(s *gbSession) bool { return s.status == "USING" }); id != "" && w.rng.IntN(2) == 0 {
		g := min(w.s[id].granted, w.reserved)
		w.note("reservation of %s taken from the balance (%d)", id, g)
		if err := w.e.rdb.HIncrBy(ctxT(t), balanceKey(w.e.res, w.per.ID()), "reserved", -g).Err(); err != nil {
			t.Fatal(err)
		}
		w.reserved -= g
		w.check(t)
		if w.s[id].row == "USING" {
			w.finishID(t, id)
		} else {
			w.giveBack(t, id, "", "its own give-back of")
		}
		return
	}
	field, d := "reserved", w.rng.Int64N(151)-100
	v := &w.reserved
	if w.rng.IntN(2) == 0 {
		field, v = "charged", &w.charged
	}
	if *v+d < 0 || d == 0 {
		return
	}
	w.note("corrupt %s by %d", field, d)
	if err := w.e.rdb.HIncrBy(ctxT(t), balanceKey(w.e.res, w.per.ID()), field, d).Err(); err != nil {
		t.Fatal(err)
	}
	*v += d
}

// ledger is the ledger's totals: charged (FINISHED rows' actual, LEAKED
// rows' grant) and reserved (USING rows' grant).
func (w *gbWorld) ledger() (charged, reserved int64) {
	for _, s := range w.s {
		switch s.row {
		case "FINISHED":
			charged += s.actual
		case "LEAKED":
			charged += s.granted
		case "USING":
			reserved += s.granted
		}
	}
	return charged, reserved
}

// reconcile measures the drift as reconciliation does (the balance minus
// the ledger, and the live sessions whose row is not USING) and writes
// the correction; stale makes another step in between; the correction is
// sometimes sent again under another token (its answer lost).
func (w *gbWorld) reconcile(t *testing.T, stale bool) {
	bal := w.e.balance(t, w.per)
	lc, lr := w.ledger()
	if bal.Charged == lc && bal.Reserved == lr {
		return
	}
	var unrec []string
	for _, id := range w.ids {
		if s := w.s[id]; s.status == "USING" && s.row != "USING" {
			unrec = append(unrec, id)
		}
	}
	a := quota.Adjustment{Charged: lc - bal.Charged, Reserved: lr - bal.Reserved, Seen: bal, Unrecorded: unrec}
	w.note("reconcile: correction %+d charged %+d reserved, %d unrecorded, stale %v", a.Charged, a.Reserved, len(unrec), stale)
	if stale {
		w.step(t, false)
		w.check(t)
	}
	for i := range 1 + w.rng.IntN(2) {
		var held int64
		for _, id := range unrec {
			if s := w.s[id]; s.status == "USING" && s.counted {
				held += s.granted
			}
		}
		want, dc, dr, werr := adjustDecision(w.charged, w.reserved, a, held)
		got, err := w.e.s.Adjust(ctxT(t), w.e.res, w.per, a, quota.Fence{})
		if got != want || !errors.Is(err, werr) || (werr == nil && err != nil) {
			w.fail(t, "correction %+v (send %d): %v %v, model: %v %v", a, i+1, got, err, want, werr)
		}
		w.charged += dc
		w.reserved += dr
		w.seen["adjust "+want.String()]++
		if !stale && i == 0 && (want == quota.AdjustApplied || want == quota.AdjustHeld) && (w.charged != lc || w.reserved != lr+held) {
			w.fail(t, "after a fresh correction: charged %d reserved %d, want the ledger's %d and %d + %d held", w.charged, w.reserved, lc, lr, held)
		}
	}
}

// rebuild drops the balance and seeds it from the ledger (the repair
// after a failover, or Redis restarted empty but for the sessions): a new
// epoch counting the open rows; a live session without a row is left out,
// and its give-back takes nothing from the rebuilt balance.
func (w *gbWorld) rebuild(t *testing.T) {
	lc, lr := w.ledger()
	var open []quota.UsageRecord
	for _, id := range w.ids {
		if s := w.s[id]; s.row == "USING" {
			open = append(open, quota.UsageRecord{ResourceName: w.e.res, SessionID: id, ClientID: "c", PeriodStart: w.per.Start,
				ApplyAmount: s.granted, GrantedAmount: s.granted, StartTime: w.per.Start, Status: quota.StatusUsing})
		}
	}
	w.note("rebuild from the ledger: charged %d reserved %d, %d open rows", lc, lr, len(open))
	if err := w.e.s.DropBalance(ctxT(t), w.e.res, w.per, quota.Fence{}); err != nil {
		t.Fatal(err)
	}
	if wrote, err := w.e.s.Seed(ctxT(t), w.e.res, w.per, w.limit, quota.PeriodTotals{Charged: lc, Reserved: lr}, open, time.Hour); err != nil || !wrote {
		w.fail(t, "rebuild: %v %v", wrote, err)
	}
	w.charged, w.reserved = lc, lr
	for _, s := range w.s {
		if s.status == "USING" {
			s.counted = s.row == "USING"
		}
	}
	w.seen["rebuilt"]++
}

// drain settles every open session: finished when recorded, else given back.
func (w *gbWorld) drain(t *testing.T) {
	for _, id := range w.ids {
		s := w.s[id]
		if s.status != "USING" {
			continue
		}
		if s.row == "USING" {
			w.e.finish(t, id, s.granted)
			if s.counted {
				w.reserved -= s.granted
			}
			w.charged += s.granted
			s.status, s.row, s.actual = "FINISHED", "FINISHED", s.granted
			continue
		}
		w.giveBack(t, id, "", "drain")
		if s.status != "CANCELLED" {
			w.fail(t, "drain: %s not given back", id)
		}
	}
	w.check(t)
}

// check compares the balance with the model: equal, never negative.
func (w *gbWorld) check(t *testing.T) {
	b := w.e.balance(t, w.per)
	if b.Charged != w.charged || b.Reserved != w.reserved || b.Charged < 0 || b.Reserved < 0 {
		w.fail(t, "balance charged %d reserved %d, model %d and %d (never negative)", b.Charged, b.Reserved, w.charged, w.reserved)
	}
}
