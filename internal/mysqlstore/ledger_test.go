package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

var period = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

// usingRec is the record of a new session as the Service inserts it.
func usingRec(id string, granted int64) quota.UsageRecord {
	return quota.UsageRecord{
		ResourceName:  "gpu",
		ClientID:      "client-1",
		SessionID:     id,
		PeriodStart:   period,
		ApplyAmount:   granted + 5,
		MinAmount:     1,
		GrantedAmount: granted,
		ChargedAmount: granted,
		StartTime:     period.Add(90 * time.Minute),
		Status:        quota.StatusUsing,
	}
}

func mustInsert(t *testing.T, s *Store, recs ...quota.UsageRecord) {
	t.Helper()
	for _, r := range recs {
		if err := s.InsertSession(testCtx(t), r); err != nil {
			t.Fatalf("insert %s: %v", r.SessionID, err)
		}
	}
}

func mustSession(t *testing.T, s *Store, id string) quota.UsageRecord {
	t.Helper()
	r, err := s.Session(testCtx(t), id)
	if err != nil {
		t.Fatalf("session %s: %v", id, err)
	}
	return r
}

func mustTotals(t *testing.T, s *Store, want quota.PeriodTotals) {
	t.Helper()
	got, err := s.PeriodTotals(testCtx(t), "gpu", period)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("PeriodTotals = %+v; want %+v", got, want)
	}
}

func countRows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.DB().GetContext(testCtx(t), &n, "SELECT COUNT(*) FROM quota_usage"); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInsertSessionRoundTrip(t *testing.T) {
	// 23:59:59.9996 truncated by the caller is 23:59:59.999 of the same day.
	lastMs := time.Date(2025, 3, 31, 23, 59, 59, 999_600_000, time.UTC).Truncate(time.Millisecond)
	cases := []struct {
		name string
		in   func(r *quota.UsageRecord)
		want func(r *quota.UsageRecord)
	}{
		{"plain", func(*quota.UsageRecord) {}, func(*quota.UsageRecord) {}},
		{"last ms of the day", func(r *quota.UsageRecord) { r.StartTime = lastMs; r.PeriodStart = lastMs },
			func(r *quota.UsageRecord) { r.StartTime = lastMs; r.PeriodStart = lastMs }},
		{"non-UTC zone comes back UTC", func(r *quota.UsageRecord) { r.StartTime = lastMs.In(time.FixedZone("X", -5*3600)) },
			func(r *quota.UsageRecord) { r.StartTime = lastMs }},
		{"sub-ms is truncated, not rounded", func(r *quota.UsageRecord) { r.StartTime = lastMs.Add(999_999) },
			func(r *quota.UsageRecord) { r.StartTime = lastMs }},
		{"finish fields are ignored", func(r *quota.UsageRecord) {
			r.Status, r.ChargedAmount, r.RefundedAmount, r.OverageAmount = quota.StatusFinished, 1, 2, 3
			r.EndTime, r.LeakRecovered = lastMs, true
		}, func(*quota.UsageRecord) {}},
		{"max amounts", func(r *quota.UsageRecord) { r.ApplyAmount, r.GrantedAmount = quota.MaxAmount, quota.MaxAmount },
			func(r *quota.UsageRecord) {
				r.ApplyAmount, r.GrantedAmount, r.ChargedAmount = quota.MaxAmount, quota.MaxAmount, quota.MaxAmount
			}},
	}
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				in := usingRec(fmt.Sprintf("rt-%d", i), 40)
				tc.in(&in)
				want := usingRec(in.SessionID, 40)
				tc.want(&want)
				mustInsert(t, s, in)
				got := mustSession(t, s, in.SessionID)
				if got != want {
					t.Fatalf("Session =\n %+v\nwant\n %+v", got, want)
				}
				if got.StartTime.Day() != want.StartTime.Day() {
					t.Fatalf("day changed: %v", got.StartTime)
				}
			})
		}
	})
}

func TestSessionNotFound(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		if _, err := s.Session(testCtx(t), "nope"); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("err = %v; want ErrSessionNotFound", err)
		}
	})
}

func TestInsertSessionDuplicate(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		first := usingRec("dup", 10)
		mustInsert(t, s, first)
		second := usingRec("dup", 99)
		second.ClientID = "other"
		err := s.InsertSession(testCtx(t), second)
		if !errors.Is(err, quota.ErrDuplicateSession) || errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("err = %v; want ErrDuplicateSession only", err)
		}
		if got := mustSession(t, s, "dup"); got != first {
			t.Fatalf("row = %+v; want first %+v", got, first)
		}
		if n := countRows(t, s); n != 1 {
			t.Fatalf("%d rows; want 1", n)
		}
	})
}

func TestInsertSessionConcurrent(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		const n = 200
		errs := make([]error, n)
		var wg sync.WaitGroup
		var sum int64
		for i := range n {
			sum += int64(i + 1)
			wg.Go(func() {
				errs[i] = s.InsertSession(testCtx(t), usingRec(fmt.Sprintf("c-%03d", i), int64(i+1)))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("insert %d: %v", i, err)
			}
		}
		if got := countRows(t, s); got != n {
			t.Fatalf("%d rows; want %d", got, n)
		}
		mustTotals(t, s, quota.PeriodTotals{Reserved: sum})
		if r := mustSession(t, s, "c-123"); r.GrantedAmount != 124 {
			t.Fatalf("c-123 = %+v", r)
		}
	})
}

// TestInsertSessionBatchWithDuplicate fills exactly one batch (BatchMaxRows
// rows, a long BatchMaxWait) in which one row repeats an existing session id
// and two rows share a new one.
func TestInsertSessionBatchWithDuplicate(t *testing.T) {
	const rows = 8
	forEachBackend(t, Options{BatchMaxRows: rows, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		// Fill the first batch with the existing row plus filler.
		existing := usingRec("existing", 7)
		errs := make([]error, rows)
		var wg sync.WaitGroup
		for i := range rows {
			wg.Go(func() {
				r := usingRec(fmt.Sprintf("pre-%d", i), 1)
				if i == 0 {
					r = existing
				}
				errs[i] = s.InsertSession(testCtx(t), r)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("pre-insert %d: %v", i, err)
			}
		}

		recs := make([]quota.UsageRecord, rows)
		for i := range recs {
			recs[i] = usingRec(fmt.Sprintf("b-%d", i), int64(100+i))
		}
		recs[3] = usingRec("existing", 1000) // duplicate of a committed row
		recs[5] = usingRec("b-4", 2000)      // duplicate inside the batch
		for i := range recs {
			wg.Go(func() { errs[i] = s.InsertSession(testCtx(t), recs[i]) })
		}
		wg.Wait()

		if !errors.Is(errs[3], quota.ErrDuplicateSession) {
			t.Fatalf("existing: err = %v; want ErrDuplicateSession", errs[3])
		}
		// Of the two b-4 rows exactly one lands.
		if (errs[4] == nil) == (errs[5] == nil) {
			t.Fatalf("b-4 errors = %v, %v; want exactly one ErrDuplicateSession", errs[4], errs[5])
		}
		for _, i := range []int{4, 5} {
			if errs[i] != nil && !errors.Is(errs[i], quota.ErrDuplicateSession) {
				t.Fatalf("b-4 #%d: %v", i, errs[i])
			}
		}
		for _, i := range []int{0, 1, 2, 6, 7} {
			if errs[i] != nil {
				t.Fatalf("row %d: %v", i, errs[i])
			}
			if got := mustSession(t, s, recs[i].SessionID); got != recs[i] {
				t.Fatalf("row %d = %+v; want %+v", i, got, recs[i])
			}
		}
		if got := mustSession(t, s, "existing"); got != existing {
			t.Fatalf("existing = %+v; want unchanged %+v", got, existing)
		}
		b4 := recs[4]
		if errs[4] != nil {
			b4 = recs[5]
		}
		if got := mustSession(t, s, "b-4"); got != b4 {
			t.Fatalf("b-4 = %+v; want %+v", got, b4)
		}
		if n := countRows(t, s); n != 2*rows-2 {
			t.Fatalf("%d rows; want %d", n, 2*rows-2)
		}
	})
}

func TestInsertSessionContextDone(t *testing.T) {
	forEachBackend(t, Options{BatchMaxRows: 2, BatchMaxWait: 50 * time.Millisecond}, func(t *testing.T, s *Store) {
		cases := []struct {
			name   string
			ctx    func() context.Context
			wantIs error
		}{
			{"cancelled", func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}, context.Canceled},
			{"deadline passed", func() context.Context {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				t.Cleanup(cancel)
				return ctx
			}, context.DeadlineExceeded},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := fmt.Sprintf("ctx-%d", i)
				err := s.InsertSession(tc.ctx(), usingRec(id, 5))
				if !errors.Is(err, tc.wantIs) {
					t.Fatalf("err = %v; want %v", err, tc.wantIs)
				}
				if _, err := s.Session(testCtx(t), id); !errors.Is(err, quota.ErrSessionNotFound) {
					t.Fatalf("row written despite done ctx: %v", err)
				}
			})
		}

		// Cancelled while waiting for company: the row is not sent, the
		// other row of the batch is.
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.InsertSession(ctx, usingRec("waiting", 5)) }()
		cancel()
		if err := s.InsertSession(testCtx(t), usingRec("company", 6)); err != nil {
			t.Fatalf("company: %v", err)
		}
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting: err = %v; want context.Canceled", err)
		}
		if _, err := s.Session(testCtx(t), "waiting"); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("cancelled row written: %v", err)
		}
		mustTotals(t, s, quota.PeriodTotals{Reserved: 6})
	})
}

func TestFinishSession(t *testing.T) {
	end := period.Add(2 * time.Hour)
	finish := func(id string, charged, refunded, overage int64) quota.UsageRecord {
		return quota.UsageRecord{ResourceName: "gpu", ClientID: "client-1", SessionID: id, ChargedAmount: charged,
			RefundedAmount: refunded, OverageAmount: overage, EndTime: end}
	}
	cases := []struct {
		name      string
		leak      bool
		finishes  []quota.UsageRecord
		want      func(r *quota.UsageRecord)
		wantTotal quota.PeriodTotals
	}{
		{
			name:     "refund",
			finishes: []quota.UsageRecord{finish("s", 30, 70, 0)},
			want: func(r *quota.UsageRecord) {
				r.Status, r.ChargedAmount, r.RefundedAmount, r.EndTime = quota.StatusFinished, 30, 70, end
			},
			wantTotal: quota.PeriodTotals{Charged: 30},
		},
		{
			name:     "overage",
			finishes: []quota.UsageRecord{finish("s", 130, 0, 30)},
			want: func(r *quota.UsageRecord) {
				r.Status, r.ChargedAmount, r.OverageAmount, r.EndTime = quota.StatusFinished, 130, 30, end
			},
			wantTotal: quota.PeriodTotals{Charged: 130},
		},
		{
			name:     "second finish is a no-op",
			finishes: []quota.UsageRecord{finish("s", 30, 70, 0), finish("s", 100, 0, 0), finish("s", 500, 0, 400)},
			want: func(r *quota.UsageRecord) {
				r.Status, r.ChargedAmount, r.RefundedAmount, r.EndTime = quota.StatusFinished, 30, 70, end
			},
			wantTotal: quota.PeriodTotals{Charged: 30},
		},
		{
			name:     "leaked row is trued up",
			leak:     true,
			finishes: []quota.UsageRecord{finish("s", 20, 80, 0)},
			want: func(r *quota.UsageRecord) {
				r.Status, r.ChargedAmount, r.RefundedAmount, r.EndTime = quota.StatusFinished, 20, 80, end
				r.LeakRecovered = true
			},
			wantTotal: quota.PeriodTotals{Charged: 20},
		},
		{
			name:     "caller-reported leak recovery",
			finishes: []quota.UsageRecord{func() quota.UsageRecord { r := finish("s", 20, 80, 0); r.LeakRecovered = true; return r }()},
			want: func(r *quota.UsageRecord) {
				r.Status, r.ChargedAmount, r.RefundedAmount, r.EndTime = quota.StatusFinished, 20, 80, end
				r.LeakRecovered = true
			},
			wantTotal: quota.PeriodTotals{Charged: 20},
		},
		{
			name:      "missing row is not an error",
			finishes:  []quota.UsageRecord{finish("other", 1, 0, 0)},
			want:      func(*quota.UsageRecord) {},
			wantTotal: quota.PeriodTotals{Reserved: 100},
		},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					s := b.open(t, Options{})
					ctx := testCtx(t)
					mustInsert(t, s, usingRec("s", 100))
					if tc.leak {
						if err := s.MarkLeaked(ctx, []quota.LeakedSession{{ResourceName: "gpu", SessionID: "s", EndTime: period.Add(time.Hour)}}); err != nil {
							t.Fatal(err)
						}
						mustTotals(t, s, quota.PeriodTotals{Charged: 100})
					}
					for _, f := range tc.finishes {
						if err := s.FinishSession(ctx, f); err != nil {
							t.Fatalf("finish: %v", err)
						}
					}
					want := usingRec("s", 100)
					tc.want(&want)
					if got := mustSession(t, s, "s"); got != want {
						t.Fatalf("row =\n %+v\nwant\n %+v", got, want)
					}
					mustTotals(t, s, tc.wantTotal)
				})
			}
		})
	}
}

func TestMarkLeaked(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		mustInsert(t, s, usingRec("using-1", 10), usingRec("using-2", 20), usingRec("done", 40), usingRec("still", 80))
		doneEnd := period.Add(3 * time.Hour)
		if err := s.FinishSession(ctx, quota.UsageRecord{ResourceName: "gpu", ClientID: "client-1", SessionID: "done", ChargedAmount: 5, RefundedAmount: 35, EndTime: doneEnd}); err != nil {
			t.Fatal(err)
		}
		doneBefore := mustSession(t, s, "done")

		leakAt1, leakAt2 := period.Add(4*time.Hour), period.Add(5*time.Hour)
		leaks := []quota.LeakedSession{
			{ResourceName: "gpu", SessionID: "using-1", PeriodStart: period, Granted: 10, EndTime: leakAt1},
			{ResourceName: "gpu", SessionID: "using-2", PeriodStart: period, Granted: 20, EndTime: leakAt2},
			{ResourceName: "gpu", SessionID: "done", PeriodStart: period, Granted: 40, EndTime: leakAt2},
			{ResourceName: "gpu", SessionID: "unknown", PeriodStart: period, Granted: 1, EndTime: leakAt2},
		}
		for range 2 { // a repeat changes nothing
			if err := s.MarkLeaked(ctx, leaks); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkLeaked(ctx, nil); err != nil {
			t.Fatalf("empty MarkLeaked: %v", err)
		}

		for _, tc := range []struct {
			id      string
			granted int64
			end     time.Time
		}{{"using-1", 10, leakAt1}, {"using-2", 20, leakAt2}} {
			want := usingRec(tc.id, tc.granted)
			want.Status, want.EndTime = quota.StatusLeaked, tc.end
			if got := mustSession(t, s, tc.id); got != want {
				t.Fatalf("%s =\n %+v\nwant\n %+v", tc.id, got, want)
			}
		}
		if got := mustSession(t, s, "done"); got != doneBefore {
			t.Fatalf("FINISHED row changed: %+v; want %+v", got, doneBefore)
		}
		if got := mustSession(t, s, "still"); got != usingRec("still", 80) {
			t.Fatalf("unlisted row changed: %+v", got)
		}
		if _, err := s.Session(ctx, "unknown"); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("unknown session created: %v", err)
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: 10 + 20 + 5, Reserved: 80})
	})
}

func TestMarkLeakedManyChunks(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		const n = markLeakedChunk + 7
		leaks := make([]quota.LeakedSession, n)
		var wg sync.WaitGroup
		for i := range n {
			id := fmt.Sprintf("m-%04d", i)
			leaks[i] = quota.LeakedSession{ResourceName: "gpu", SessionID: id, EndTime: period.Add(time.Duration(i) * time.Millisecond)}
			wg.Go(func() {
				if err := s.InsertSession(testCtx(t), usingRec(id, 2)); err != nil {
					t.Errorf("insert %s: %v", id, err)
				}
			})
		}
		wg.Wait()
		if err := s.MarkLeaked(testCtx(t), leaks); err != nil {
			t.Fatal(err)
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: 2 * n})
		last := mustSession(t, s, leaks[n-1].SessionID)
		if last.Status != quota.StatusLeaked || last.EndTime != leaks[n-1].EndTime {
			t.Fatalf("last = %+v", last)
		}
	})
}

func TestPeriodTotalsScope(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		other := usingRec("other-res", 1000)
		other.ResourceName = "cpu"
		next := usingRec("next-period", 2000)
		next.PeriodStart = period.Add(24 * time.Hour)
		mustInsert(t, s, usingRec("a", 3), other, next)
		mustTotals(t, s, quota.PeriodTotals{Reserved: 3})
		got, err := s.PeriodTotals(testCtx(t), "none", period)
		if err != nil || got != (quota.PeriodTotals{}) {
			t.Fatalf("empty period = %+v, %v", got, err)
		}
	})
}
