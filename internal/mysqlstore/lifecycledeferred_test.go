package mysqlstore

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// lcListed returns the ids listed in quota_usage_rollup_deferred for res.
func lcListed(t *testing.T, s *Store, res string) []int64 {
	t.Helper()
	var ids []int64
	if err := s.db.SelectContext(testCtx(t), &ids, `SELECT id FROM quota_usage_rollup_deferred
		WHERE resource_name = ? ORDER BY id`, res); err != nil {
		t.Fatal(err)
	}
	return ids
}

// lcRowAt returns the id and session id of res's row that started at start.
func lcRowAt(t *testing.T, s *Store, res string, start time.Time) (int64, string) {
	t.Helper()
	var r struct {
		ID      int64  `db:"id"`
		Session string `db:"session_id"`
	}
	if err := s.db.GetContext(testCtx(t), &r, `SELECT id, session_id FROM quota_usage
		WHERE resource_name = ? AND start_ms = ?`, res, start.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	return r.ID, r.Session
}

// TestLifecycleRollsUpPastRowsThatMayStillChange (issue 23 §2): a LEAKED or
// CANCELLED row settled less than RollupAfter ago may still change (a late
// finish trues a leaked row up, a retried apply revives a cancelled one),
// but no longer holds the rollup back: the watermark reaches the target
// (the current period's start) and such rows are kept raw in a list, so
// that usage and period totals stay exact through the change, retention
// deletes none of them, and a later pass sums each once it can no longer
// change. On main the rollup stopped at the first such row, and the
// watermark of a resource with leaks stayed QC_LEDGER_ROLLUP_AFTER behind
// (a day of raw rows in every usage answer: 1.23 s at 35 M rows).
func TestLifecycleRollsUpPastRowsThatMayStillChange(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("lcd-%d", time.Now().UnixNano())
		rows := lcLedger(t, s, res, 300, 5)
		cancelled := lcRow{start: lcBase.Add(30*time.Hour + 7*time.Millisecond), end: lcBase.Add(78*time.Hour + 30*time.Minute),
			status: "CANCELLED", client: "a", granted: 9, refund: 9}
		leaked := lcRow{start: lcBase.Add(50*time.Hour + 3*time.Millisecond), end: lcBase.Add(79 * time.Hour),
			status: "LEAKED", client: "b", line: "x", granted: 4, charged: 4}
		stays := lcRow{start: lcBase.Add(20*time.Hour + 5*time.Millisecond), end: lcBase.Add(79 * time.Hour),
			status: "LEAKED", client: "c", granted: 6, charged: 6}
		lcInsert(t, s, res, []lcRow{cancelled, leaked, stays})
		leakedID, leakedSession := lcRowAt(t, s, res, leaked.start)
		cancelledID, cancelledSession := lcRowAt(t, s, res, cancelled.start)
		staysID, _ := lcRowAt(t, s, res, stays.start)
		before := lcView(t, s, res)
		target, settled := lcBase.Add(72*time.Hour), lcBase.Add(78*time.Hour)
		now := lcBase.Add(80 * time.Hour)

		n, st := lcRollup(t, s, res, target, settled, 40)
		if !st.Done || st.Blocked || !st.RolledTo.Equal(target) {
			t.Fatalf("rollup stopped at %+v; want done at the target %s, past the rows that may still change", st, target)
		}
		if n != int64(len(rows)) {
			t.Fatalf("summed %d rows; want the %d settled long ago, not the three that may still change", n, len(rows))
		}
		want := []int64{leakedID, cancelledID, staysID}
		slices.Sort(want)
		if got := lcListed(t, s, res); !slices.Equal(got, want) {
			t.Fatalf("listed %v; want the leaked and the cancelled rows %v", got, want)
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, before) {
			t.Fatalf("after the rollup the answers changed:\n got %+v\nwant %+v", got, before)
		}
		lcCheckExact(t, s, res, now, true)

		// A late finish trues the leaked row up; a retried apply revives
		// the cancelled one (its start moves to the retry's, above the
		// watermark). Both answers follow the raw rows.
		if err := s.FinishSession(testCtx(t), quota.UsageRecord{ResourceName: res, ClientID: "b", SessionID: leakedSession,
			PeriodStart: lcBase.Add(48 * time.Hour), GrantedAmount: 4, ChargedAmount: 3, RefundedAmount: 1,
			StartTime: leaked.start, EndTime: now, Status: quota.StatusFinished}); err != nil {
			t.Fatal(err)
		}
		var status string
		if err := s.db.GetContext(testCtx(t), &status, `SELECT status FROM quota_usage WHERE id = ?`, leakedID); err != nil || status != "FINISHED" {
			t.Fatalf("the late finish left the leaked row %q (%v)", status, err)
		}
		revived, err := s.ReviveSession(testCtx(t), quota.UsageRecord{ResourceName: res, ClientID: "a",
			SessionID: cancelledSession, PeriodStart: target, GrantedAmount: 9, ChargedAmount: 9,
			StartTime: now, Status: quota.StatusUsing})
		if err != nil || !revived {
			t.Fatalf("revive: %v, %v", revived, err)
		}
		lcCheckExact(t, s, res, now, true)
		// The next pass sums the trued-up row (FINISHED: it never changes
		// again) and drops the revived one's entry; the other leaked row
		// stays listed.
		if again, st := lcRollup(t, s, res, target, settled, 40); again != 1 || !st.Done {
			t.Fatalf("the next rollup summed %d rows (%+v); want the trued-up one", again, st)
		}
		if got := lcListed(t, s, res); !slices.Equal(got, []int64{staysID}) {
			t.Fatalf("listed %v; want only the leaked row not trued up, %d", got, staysID)
		}
		lcCheckExact(t, s, res, now, true)

		// Retention deletes every rolled-up row but the listed one.
		changed := lcView(t, s, res)
		if d := lcDelete(t, s, res, target, 50); d != int64(len(rows))+1 {
			t.Fatalf("deleted %d rows; want the %d summed", d, len(rows)+1)
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, changed) {
			t.Fatalf("after the deletion the answers changed:\n got %+v\nwant %+v", got, changed)
		}

		// A resource with listed rows is a candidate, with no row to roll up.
		c, err := s.Candidates(testCtx(t), target, time.Time{}, "", 1000)
		if err != nil || !slices.Contains(c.Resources, res) {
			t.Fatalf("candidates %+v, %v; want %s (rows listed)", c, err, res)
		}
		// Once the bound passes it, the listed row is summed and taken off.
		n, st = lcRollup(t, s, res, target, lcBase.Add(100*time.Hour), 40)
		if n != 1 || !st.Done || len(lcListed(t, s, res)) != 0 {
			t.Fatalf("summed %d (%+v), listed %v; want the leaked row summed and an empty list", n, st, lcListed(t, s, res))
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, changed) {
			t.Fatalf("after summing the listed row the answers changed:\n got %+v\nwant %+v", got, changed)
		}
		if d := lcDelete(t, s, res, target, 50); d != 1 || lcCount(t, s, res) != 1 {
			t.Fatalf("deleted %d, %d left; want the leaked row deleted and the revived one kept", d, lcCount(t, s, res))
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, changed) {
			t.Fatalf("after the last deletion the answers changed:\n got %+v\nwant %+v", got, changed)
		}
	})
}

// TestLifecycleCountsARevivedAndRecancelledRowOnce: a listed CANCELLED row
// that a retried apply revives (its start moves to the retry's) and that is
// cancelled again is passed by the rollup a second time, at its new start,
// and listed there; its old entry must not count it too (usage and period
// totals equal the raw rows'), and the next visit drops the old entry.
func TestLifecycleCountsARevivedAndRecancelledRowOnce(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("lcv-%d", time.Now().UnixNano())
		lcLedger(t, s, res, 100, 6)
		cancelled := lcRow{start: lcBase.Add(30*time.Hour + 9*time.Millisecond), end: lcBase.Add(78*time.Hour + 30*time.Minute),
			status: "CANCELLED", client: "a", granted: 9, refund: 9}
		lcInsert(t, s, res, []lcRow{cancelled})
		_, session := lcRowAt(t, s, res, cancelled.start)
		settled := lcBase.Add(78 * time.Hour)
		if _, st := lcRollup(t, s, res, lcBase.Add(72*time.Hour), settled, 40); !st.Done {
			t.Fatalf("first rollup %+v", st)
		}
		retry := quota.UsageRecord{ResourceName: res, ClientID: "a", SessionID: session,
			PeriodStart: lcBase.Add(72 * time.Hour), GrantedAmount: 9, ChargedAmount: 9,
			StartTime: lcBase.Add(80 * time.Hour), Status: quota.StatusUsing}
		if ok, err := s.ReviveSession(testCtx(t), retry); err != nil || !ok {
			t.Fatalf("revive: %v, %v", ok, err)
		}
		retry.EndTime = retry.StartTime.Add(time.Second)
		if err := s.CancelSession(testCtx(t), retry); err != nil {
			t.Fatal(err)
		}
		now := lcBase.Add(97 * time.Hour)
		if _, st := lcRollup(t, s, res, lcBase.Add(96*time.Hour), settled, 40); !st.Done {
			t.Fatalf("second rollup %+v", st)
		}
		lcCheckExact(t, s, res, now, true)
		if got := lcListed(t, s, res); len(got) != 1 {
			t.Fatalf("listed %v; want the re-cancelled row once, at its new start", got)
		}
	})
}
