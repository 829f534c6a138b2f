package mysqlstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// TestFinishAndMarkLeakedMatchResourceAndClient: the ledger's updates of a
// session row match its resource and client, not its id alone. A finish or
// a sweep of session X on another resource, or of another client (a
// fail-open session whose bare id is this row's: it has no row of its own
// until reconciliation writes one), leaves this row USING with its amounts,
// without error. Before, they settled it (FINISHED with the other
// session's usage, or LEAKED).
func TestFinishAndMarkLeakedMatchResourceAndClient(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		mustInsert(t, s, usingRec("x", 40), usingRec("y", 50))
		end := period.Add(2 * time.Hour)
		for _, f := range []quota.UsageRecord{
			{ResourceName: "other", ClientID: "client-1", SessionID: "x", ChargedAmount: 7, RefundedAmount: 93, EndTime: end},
			{ResourceName: "gpu", ClientID: "client-2", SessionID: "x", ChargedAmount: 7, RefundedAmount: 93, EndTime: end},
		} {
			if err := s.FinishSession(ctx, f); err != nil {
				t.Fatalf("finish of %s on %s by %s: %v; want no error", f.SessionID, f.ResourceName, f.ClientID, err)
			}
		}
		if err := s.MarkLeaked(ctx, []quota.LeakedSession{
			{ResourceName: "other", ClientID: "client-1", SessionID: "y", EndTime: end},
			{ResourceName: "gpu", ClientID: "client-2", SessionID: "y", EndTime: end},
			{ResourceName: "other", SessionID: "x", EndTime: end}, // no client reported: any client's, but on its resource
		}); err != nil {
			t.Fatal(err)
		}
		if got, want := mustSession(t, s, "x"), usingRec("x", 40); got != want {
			t.Fatalf("x =\n %+v\nwant it untouched\n %+v", got, want)
		}
		if got, want := mustSession(t, s, "y"), usingRec("y", 50); got != want {
			t.Fatalf("y =\n %+v\nwant it untouched\n %+v", got, want)
		}
		// The row's own resource and client still settle it; a leak
		// without a client id matches any client's.
		if err := s.MarkLeaked(ctx, []quota.LeakedSession{{ResourceName: "gpu", SessionID: "y", EndTime: end}}); err != nil {
			t.Fatal(err)
		}
		if got := mustSession(t, s, "y"); got.Status != quota.StatusLeaked || got.ChargedAmount != 50 {
			t.Fatalf("y = %+v; want LEAKED, charged 50", got)
		}
		f := finishRec("x", 30, 10, 0, end)
		if err := s.FinishSession(ctx, f); err != nil {
			t.Fatal(err)
		}
		if got, want := mustSession(t, s, "x"), settled("x", 40, f, false); got != want {
			t.Fatalf("x =\n %+v\nwant\n %+v", got, want)
		}
	})
}

// TestFinishRowsOneIDOfTwoSessions: one group commit holding finishes of
// id X for two resources settles the row with its own resource's record,
// whichever comes first (the other's goes in a statement of its own).
func TestFinishRowsOneIDOfTwoSessions(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		mustInsert(t, s, usingRec("z", 10), usingRec("w", 20))
		end := period.Add(time.Hour)
		foreign := finishRec("z", 99, 0, 89, end)
		foreign.ResourceName = "other"
		own, w := finishRec("z", 4, 6, 0, end), finishRec("w", 20, 0, 0, end)
		if err := s.finishRows(testCtx(t), []quota.UsageRecord{foreign, w, own, foreign, own}); err != nil {
			t.Fatal(err)
		}
		if got, want := mustSession(t, s, "z"), settled("z", 10, own, false); got != want {
			t.Fatalf("z =\n %+v\nwant\n %+v", got, want)
		}
		if got, want := mustSession(t, s, "w"), settled("w", 20, w, false); got != want {
			t.Fatalf("w =\n %+v\nwant\n %+v", got, want)
		}
	})
}

func TestFinishRounds(t *testing.T) {
	r := func(id, res string, c int64) quota.UsageRecord {
		return quota.UsageRecord{SessionID: id, ResourceName: res, ChargedAmount: c}
	}
	cases := []struct {
		name string
		in   []quota.UsageRecord
		want [][]quota.UsageRecord
	}{
		{"distinct", []quota.UsageRecord{r("a", "r1", 1), r("b", "r1", 2)}, [][]quota.UsageRecord{{r("a", "r1", 1), r("b", "r1", 2)}}},
		{"repeats", []quota.UsageRecord{r("a", "r1", 1), r("a", "r1", 2)}, [][]quota.UsageRecord{{r("a", "r1", 1)}}},
		{"one id, two resources", []quota.UsageRecord{r("a", "r2", 1), r("b", "r1", 2), r("a", "r1", 3), r("a", "r2", 4), r("a", "r3", 5)},
			[][]quota.UsageRecord{{r("a", "r2", 1), r("b", "r1", 2)}, {r("a", "r1", 3)}, {r("a", "r3", 5)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := finishRounds(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("finishRounds = %v; want %v", got, tc.want)
			}
		})
	}
}
