package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// poolWorld is one resource with lines, prepared on a backend and in the
// reference model alike.
type poolWorld struct {
	e     *env
	per   quota.Period
	lay   pools.Layout
	set   pools.Settings
	specs []pools.LineSpec
	model *pools.Model
	names []string
	now   int64    // store clock at set-up, ms
	open  []string // granted, not finished
	cuts  int      // lent buffer cut back by shrink, cut by cut
	// closed counts the applies refused because their line was closing
	// (being deleted), in the store and the model alike.
	closed int
	// expired counts the applies decided on a line whose closing mark had
	// expired (its DELETE died): not refused for it, in both.
	expired int
}

func newPoolWorld(t *testing.T, e *env, limit int64, s pools.Settings, lines []pools.LineSpec) *poolWorld {
	t.Helper()
	lay, err := pools.Plan(limit, s, lines)
	if err != nil {
		t.Fatal(err)
	}
	w := &poolWorld{e: e, per: e.current(t), lay: lay, set: s, specs: lines, model: pools.NewModel(lay, true), now: e.now(t).UnixMilli()}
	for _, l := range lay.Lines {
		w.names = append(w.names, l.Name)
	}
	e.seed(t, w.per, limit, quota.PeriodTotals{})
	if _, _, err := e.s.SetPoolLayout(ctxT(t), e.res, lay, &pools.Moves{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.s.SeedPools(ctxT(t), e.res, w.per, pools.Totals{}); err != nil || !ok {
		t.Fatalf("SeedPools: %v %v", ok, err)
	}
	return w
}

func (w *poolWorld) apply(t *testing.T, r pools.ApplyReq) (pools.Decision, quota.ApplyResult) {
	t.Helper()
	want, werr := w.model.Apply(r)
	c := w.e.cmd(r.SessionID, r.Amount, r.Min, w.per)
	// As the Service says: no grant not yet expired, so the script skips them.
	noGrants := true
	for _, g := range w.model.Grants {
		if !g.Voided && g.ExpiresMs > r.Now {
			noGrants = false
		}
	}
	c.Pools = &quota.PoolsCmd{Line: r.Line, Critical: r.Critical, Continuation: r.Continuation, NoGrants: noGrants}
	got, gerr := w.e.s.Apply(ctxT(t), c)
	if !errors.Is(gerr, werr) && !(werr == nil && gerr == nil) {
		t.Fatalf("apply %+v: store error %v, model error %v", r, gerr, werr)
	}
	if werr != nil {
		if errors.Is(werr, pools.ErrLineClosing) {
			w.closed++
		}
		return want, got
	}
	if l := w.model.Lines[r.Line]; l != nil && l.ClosingUntil != 0 {
		w.expired++ // decided on a line whose closing mark expired
	}
	if l := w.model.Lines[r.Line]; l != nil && got.Tight != (l.Buffer > 0) {
		t.Fatalf("apply %+v: tight %v, model buffer lent %d", r, got.Tight, l.Buffer)
	}
	if want.Reason == "" && got.Outcome == quota.ApplyGranted {
		w.open = append(w.open, r.SessionID)
	}
	if got.Reason != want.Reason || got.Granted != want.Granted || !sameDrawn(got.Drawn.Drawn(), want.Drawn) {
		t.Fatalf("apply %+v:\n store %s granted %d drawn %+v\n model %s granted %d drawn %+v",
			r, got.Reason, got.Granted, got.Drawn, want.Reason, want.Granted, want.Drawn)
	}
	// lineRemaining, granted or refused: what the line's next apply of the
	// same kind could be granted (pools.Model.LineRoom; 0 for non-critical
	// work the watermark would refuse next), the same in Lua and the model.
	if r.Line != "" && (got.Outcome == quota.ApplyGranted || got.Outcome == quota.ApplyExhausted) && got.LineRemaining != want.Remaining {
		t.Fatalf("apply %+v (%s, granted %d): store lineRemaining %d, model %d", r, got.Reason, got.Granted, got.LineRemaining, want.Remaining)
	}
	return want, got
}

func sameDrawn(a, b pools.Drawn) bool {
	return a.Base == b.Base && a.Dedicated == b.Dedicated && a.Shared == b.Shared && a.Buffer == b.Buffer &&
		a.Grant == b.Grant && slices.Equal(a.Grants, b.Grants)
}

// check compares every counter the store keeps with the model's.
func (w *poolWorld) check(t *testing.T, step int) {
	t.Helper()
	got, err := w.e.s.PoolModel(ctxT(t), w.e.res, w.per, w.lay)
	if err != nil {
		t.Fatal(err)
	}
	if got.SharedUsed != w.model.SharedUsed || got.SharedBuffer != w.model.SharedBuffer {
		t.Fatalf("step %d: shared used %d / buffer %d, model %d / %d", step, got.SharedUsed, got.SharedBuffer, w.model.SharedUsed, w.model.SharedBuffer)
	}
	if len(w.lay.Lines) == 0 && got.BaseUsed != w.model.BaseUsed {
		t.Fatalf("step %d: base used %d, model %d", step, got.BaseUsed, w.model.BaseUsed)
	}
	for _, n := range w.names {
		g, m := *got.Lines[n], *w.model.Lines[n]
		m.Reserved, m.Charged = 0, 0 // the store keeps these per period, not per line
		if !reflect.DeepEqual(g, m) {
			t.Fatalf("step %d: line %s\n store %+v\n model %+v", step, n, g, m)
		}
	}
	used := map[string]int64{}
	for _, g := range got.Grants {
		used[g.ID] = g.Used
	}
	for _, g := range w.model.Grants {
		if !g.Voided && used[g.ID] != g.Used {
			t.Fatalf("step %d: grant %s used %d, model %d", step, g.ID, used[g.ID], g.Used)
		}
	}
}

func (w *poolWorld) addGrant(t *testing.T, g pools.Grant) {
	t.Helper()
	if err := w.model.AddGrant(g); err != nil {
		return
	}
	if err := w.e.s.PutGrant(ctxT(t), w.e.res, g); err != nil {
		t.Fatal(err)
	}
}

// TestPoolApplyMatchesTheModel drives random applies and grants through
// apply.lua and through pools.Model and demands identical decisions
// and counters, on real Redis and miniredis.
func TestPoolApplyMatchesTheModel(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		refusedBy := map[pools.Reason]int{}
		spare := 0
		cuts, closed, expired := 0, 0, 0
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 13))
			limit := int64(1000 + rng.IntN(100_000))
			lines := pools.LineNames(3 + rng.IntN(5))
			if seed == 3 {
				lines = nil // a resource without lines, with grants
			}
			s := pools.DefaultSettings()
			s.BorrowLimitPercent = []int64{0, 50, 300, 1000}[rng.IntN(4)]
			w := newPoolWorld(t, e, limit, s, lines)
			if seed > 0 {
				// later seeds use fresh resources: same backend, new names
				e.res = newResource(t, e.rdb)
				w = newPoolWorld(t, e, limit, s, lines)
			}
			hour := int64(time.Hour / time.Millisecond)
			for step := range 150 {
				switch op := rng.IntN(16); {
				case op >= 14 && len(w.open) > 0:
					w.cancel(t, rng)
				case op >= 12 && len(w.open) > 0:
					w.finish(t, rng)
				case op >= 10 && len(w.names) > 1 && rng.IntN(6) == 0:
					w.shrink(t, rng)
				case op >= 10 && len(w.names) > 1:
					w.move(t, rng)
				case op == 8 && len(w.names) > 0 && rng.IntN(3) == 0:
					w.closeLine(t, rng)
				case op < 8:
					line := ""
					if len(w.names) > 0 {
						line = w.names[rng.IntN(len(w.names))]
					}
					if rng.IntN(40) == 0 {
						line = "no-such-line"
					}
					sbuf := w.model.SharedBuffer
					d, _ := w.apply(t, pools.ApplyReq{SessionID: fmt.Sprintf("s%d-%d", seed, step), Line: line,
						Amount: 1 + rng.Int64N(limit/8+1), Min: rng.Int64N(2) * (1 + rng.Int64N(limit/20+1)),
						Critical: rng.IntN(3) > 0, Continuation: rng.IntN(4) == 0, Now: w.now})
					refusedBy[d.Reason]++
					if w.model.SharedBuffer > sbuf {
						spare++ // critical work or a continuation put the spare buffer into the shared pool
					}
				default:
					// Active (expiring at various times), future or expired grants.
					eff := w.now - hour + rng.Int64N(3)*hour*3/2
					var line string
					if len(w.names) > 0 && rng.IntN(2) == 0 {
						line = w.names[rng.IntN(len(w.names))]
					}
					w.addGrant(t, pools.Grant{ID: fmt.Sprintf("g%d", step), Line: line, Amount: 1 + rng.Int64N(limit/10+1),
						EffectiveMs: eff, ExpiresMs: eff + hour/2 + rng.Int64N(4)*hour})
				}
				w.check(t, step)
			}
			cuts += w.cuts
			closed += w.closed
			expired += w.expired
		}
		if closed == 0 {
			t.Errorf("no apply met a closing line: the closing rule was never compared")
		}
		if expired == 0 {
			t.Errorf("no apply met an expired closing mark: its rule was never compared")
		}
		if cuts == 0 {
			t.Errorf("no shrink cut lent buffer back: the cuts were never compared")
		}
		// Every decision was exercised (the watermark's counter included).
		for _, r := range []pools.Reason{"", pools.ReasonWatermark, pools.ReasonLineExhausted, pools.ReasonPoolExhausted} {
			if refusedBy[r] == 0 {
				t.Errorf("no apply ended with %q: %v", r, refusedBy)
			}
		}
		t.Logf("applies that put the spare buffer into the shared pool: %d", spare)
		if spare == 0 {
			t.Error("no apply put the spare buffer into the shared pool (pools.Model.SpareToShared)")
		}
	})
}

// shrink lowers the limit or the buffer under what may be lent and held:
// a new limit (50 … 100 % of it) and bufferPercent (0 … 15, the rest to
// the dedicated pool), and now and then a line's tier changed, as PUT
// /admin/policies/{r} or …/pools do (the limit key, then pool_layout.lua),
// and the same in the model (Model.Relayout). The lines' pools may then add
// up to more than the limit (what lines hold stays, and lent buffer stayed
// before pool_layout.lua cut it back): apply.lua's cap by the limit is what
// keeps the grants within it.
func (w *poolWorld) shrink(t *testing.T, rng *rand.Rand) {
	t.Helper()
	s := w.set
	rest := s.DedicatedPercent + s.BufferPercent
	s.BufferPercent = rng.Int64N(min(rest, 15) + 1)
	s.DedicatedPercent = rest - s.BufferPercent
	specs := slices.Clone(w.specs)
	if rng.IntN(3) == 0 {
		// An operator moves a line to another tier: it starts again at the
		// new tier's watermark, in the Lua and in the model.
		i := rng.IntN(len(specs))
		tiers := []pools.Tier{pools.TierCore, pools.TierGrowth, pools.TierExplore}
		specs[i].Tier = tiers[rng.IntN(len(tiers))]
	}
	lay, err := pools.Plan(w.lay.Limit*(50+rng.Int64N(51))/100, s, specs)
	if err != nil {
		return
	}
	w.specs = specs
	if err := w.e.rdb.Set(ctxT(t), limitKey(w.e.res), lay.Limit, 0).Err(); err != nil {
		t.Fatal(err)
	}
	ok, cuts, err := w.e.s.SetPoolLayout(ctxT(t), w.e.res, lay, nil)
	if err != nil || !ok {
		t.Fatalf("SetPoolLayout: %v %v", ok, err)
	}
	// The lent buffer cut back, which the caller journals (RETURN events),
	// is the model's, cut for cut.
	if want := w.model.Relayout(lay); !slices.Equal(cuts, want) {
		t.Fatalf("pool_layout.lua cut %+v, the model %+v", cuts, want)
	}
	w.cuts += len(cuts)
	w.lay = lay
}

// closeLine marks a random line closing (a DELETE of it deciding, its
// mark good for an hour), or open again, or leaves the mark a DELETE that
// died an hour ago left (its deadline passed), or makes a mark the
// tombstone of a DELETE that committed, in the store (pool_close.lua) and
// the model (CloseLine): the store's count of the line's open sessions is
// the model's, and applies on a line whose mark holds are refused in both
// (pools.ErrLineClosing), those on a line whose mark expired are decided
// as on any line.
func (w *poolWorld) closeLine(t *testing.T, rng *rand.Rand) {
	t.Helper()
	line := w.names[rng.IntN(len(w.names))]
	l := w.model.Lines[line]
	switch {
	case l.Closing(w.now) && l.ClosingUntil != pools.Deleted && rng.IntN(3) == 0:
		mark := l.ClosingUntil
		if err := w.model.CloseLine(line, pools.Deleted); err != nil {
			t.Fatal(err)
		}
		if err := w.e.s.EndClosing(ctxT(t), w.e.res, line, mark, true); err != nil {
			t.Fatal(err)
		}
	case l.Closing(w.now):
		if err := w.model.CloseLine(line, 0); err != nil {
			t.Fatal(err)
		}
		if err := w.e.s.EndClosing(ctxT(t), w.e.res, line, 0, false); err != nil {
			t.Fatal(err)
		}
	case rng.IntN(3) == 0:
		// What a DELETE that died an hour ago left: a mark past its deadline.
		dead := w.now - int64(time.Hour/time.Millisecond)
		if err := w.model.CloseLine(line, dead); err != nil {
			t.Fatal(err)
		}
		if err := w.e.rdb.HSet(ctxT(t), poolKey(w.e.res), "cl:"+line, dead).Err(); err != nil {
			t.Fatal(err)
		}
	default:
		open, mark, err := w.e.s.CloseLine(ctxT(t), w.e.res, line, time.Hour)
		var want int64
		for _, id := range w.open {
			if w.model.Sessions[id].Line == line {
				want++
			}
		}
		if err != nil || open != want {
			t.Fatalf("close line %s: store counts %d open sessions (err %v), model %d", line, open, err, want)
		}
		if err := w.model.CloseLine(line, mark); err != nil {
			t.Fatal(err)
		}
	}
}

// finish settles a random open session in both, with up to 1.5 × its grant.
func (w *poolWorld) finish(t *testing.T, rng *rand.Rand) {
	t.Helper()
	i := rng.IntN(len(w.open))
	id := w.open[i]
	w.open = append(w.open[:i], w.open[i+1:]...)
	granted := w.model.Sessions[id].Granted
	actual := rng.Int64N(granted*3/2 + 1)
	if _, err := w.model.Finish(id, actual); err != nil {
		t.Fatal(err)
	}
	got, err := w.e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: w.e.res, SessionID: id, Actual: actual, Retention: time.Hour})
	if err != nil || got.Charged != actual {
		t.Fatalf("finish %s: %+v %v", id, got, err)
	}
}

// cancel gives back a random open session in both (cancel.lua, as after a
// ledger insert that failed), now and then cancels it again (nothing more
// changes) and applies again with its id (a fresh apply).
func (w *poolWorld) cancel(t *testing.T, rng *rand.Rand) {
	t.Helper()
	i := rng.IntN(len(w.open))
	id := w.open[i]
	w.open = append(w.open[:i], w.open[i+1:]...)
	s := *w.model.Sessions[id]
	for range 1 + rng.IntN(2) {
		w.model.Cancel(id)
		if err := w.e.s.Cancel(ctxT(t), w.e.res, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	if rng.IntN(3) == 0 {
		w.check(t, -1)
		w.apply(t, pools.ApplyReq{SessionID: id, Line: s.Line, Amount: 1 + rng.Int64N(w.lay.Limit/8+1), Critical: true, Now: w.now})
	}
}

// move makes one random release, return, reclaim or give-back in the
// model and the store and demands the same amount moved.
func (w *poolWorld) move(t *testing.T, rng *rand.Rand) {
	t.Helper()
	a, b := w.names[rng.IntN(len(w.names))], w.names[rng.IntN(len(w.names))]
	amount := 1 + rng.Int64N(w.lay.Limit/10+1)
	var want int64
	var m pools.Move
	switch rng.IntN(4) {
	case 0:
		line := []string{"", a}[rng.IntN(2)]
		m = pools.Move{Op: "release", Line: line, Amount: amount}
		if w.model.Release(line, amount) == nil {
			want = amount
		}
	case 1:
		line := []string{"", a}[rng.IntN(2)]
		m = pools.Move{Op: "return", Line: line, Amount: amount}
		want = w.model.Return(line, amount)
	case 2:
		m = pools.Move{Op: "reclaim", Line: a, To: b, Amount: amount}
		want = w.model.Reclaim(a, b, amount)
	default:
		m = pools.Move{Op: "giveback", Line: a, To: b, Amount: amount}
		want = w.model.GiveBack(a, b, amount)
	}
	got, free, err := w.e.s.MovePools(ctxT(t), w.e.res, w.per, m)
	if a == b && (m.Op == "reclaim" || m.Op == "giveback") {
		if !errors.Is(err, pools.ErrUnknownLine) {
			t.Fatalf("%+v: err %v", m, err)
		}
		return
	}
	if err != nil || got != want || free != w.model.BufferFree() {
		t.Fatalf("%+v: store moved %d (free %d, err %v), model %d (free %d)", m, got, free, err, want, w.model.BufferFree())
	}
}

// forEachServer is forEachBackend on real Redis and miniredis without
// auto-pipelining (the pool scripts' decisions do not depend on it, and the
// randomized tests are long).
func forEachServer(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	t.Parallel()
	for _, b := range []string{"redis", "miniredis"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, b))
		})
	}
}
