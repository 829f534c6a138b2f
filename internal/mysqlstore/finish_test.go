package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// finishRec is the record the Service passes to FinishSession for
// usingRec(id, …)'s session.
func finishRec(id string, charged, refunded, overage int64, end time.Time) quota.UsageRecord {
	u := usingRec(id, 0)
	return quota.UsageRecord{ResourceName: u.ResourceName, ClientID: u.ClientID, SessionID: id, ChargedAmount: charged, RefundedAmount: refunded,
		OverageAmount: overage, EndTime: end, Status: quota.StatusFinished}
}

// settled is usingRec(id, granted) after f settled it.
func settled(id string, granted int64, f quota.UsageRecord, leakRecovered bool) quota.UsageRecord {
	r := usingRec(id, granted)
	r.Status, r.ChargedAmount, r.RefundedAmount, r.OverageAmount = quota.StatusFinished, f.ChargedAmount, f.RefundedAmount, f.OverageAmount
	r.EndTime, r.LeakRecovered = f.EndTime, leakRecovered
	return r
}

// finishAll runs FinishSession for every record at once and returns the
// errors in the same order.
func finishAll(t *testing.T, s *Store, recs []quota.UsageRecord) []error {
	t.Helper()
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	for i := range recs {
		wg.Go(func() { errs[i] = s.FinishSession(testCtx(t), recs[i]) })
	}
	wg.Wait()
	return errs
}

// insertAll inserts recs concurrently (group-committed).
func insertAll(t *testing.T, s *Store, recs []quota.UsageRecord) {
	t.Helper()
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	for i := range recs {
		wg.Go(func() { errs[i] = s.InsertSession(testCtx(t), recs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("insert %s: %v", recs[i].SessionID, err)
		}
	}
}

func TestFinishSessionConcurrentDistinctRows(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		const n = 200
		using := make([]quota.UsageRecord, n)
		fins := make([]quota.UsageRecord, n)
		end := period.Add(3 * time.Hour)
		var charged int64
		for i := range n {
			id := fmt.Sprintf("f-%03d", i)
			using[i] = usingRec(id, 10)
			// Refunds, exact use and overages, each with its own end time.
			actual := int64(i % 15)
			fins[i] = finishRec(id, actual, max(10-actual, 0), max(actual-10, 0), end.Add(time.Duration(i)*time.Millisecond))
			fins[i].LeakRecovered = i%7 == 0
			charged += actual
		}
		insertAll(t, s, using)
		for i, err := range finishAll(t, s, fins) {
			if err != nil {
				t.Fatalf("finish %d: %v", i, err)
			}
		}
		for i := range n {
			want := settled(using[i].SessionID, 10, fins[i], i%7 == 0)
			if got := mustSession(t, s, want.SessionID); got != want {
				t.Fatalf("row %d =\n %+v\nwant\n %+v", i, got, want)
			}
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: charged})
	})
}

// TestFinishSessionOneBatch proves the finishes of one batch go out as one
// statement: with a one-minute BatchMaxWait the batch is sent only because
// it is full, and OnGroupCommit sees one insert and one finish of all rows.
func TestFinishSessionOneBatch(t *testing.T) {
	const rows = 16
	var mu sync.Mutex
	var statements []string
	opts := Options{BatchMaxRows: rows, BatchMaxWait: time.Minute, OnGroupCommit: func(op string, n int) {
		mu.Lock()
		defer mu.Unlock()
		statements = append(statements, fmt.Sprintf("%s:%d", op, n))
	}}
	forEachBackend(t, opts, func(t *testing.T, s *Store) {
		mu.Lock()
		statements = nil // the subtests run one after the other
		mu.Unlock()
		using := make([]quota.UsageRecord, rows)
		fins := make([]quota.UsageRecord, rows)
		for i := range rows {
			using[i] = usingRec(fmt.Sprintf("one-%02d", i), 50)
			fins[i] = finishRec(using[i].SessionID, int64(i), 50-int64(i), 0, period.Add(time.Hour))
		}
		insertAll(t, s, using) // one INSERT batch, full
		for i, err := range finishAll(t, s, fins) {
			if err != nil {
				t.Fatalf("finish %d: %v", i, err)
			}
		}
		mu.Lock()
		got := slices.Clone(statements)
		mu.Unlock()
		if want := []string{fmt.Sprintf("insert:%d", rows), fmt.Sprintf("finish:%d", rows)}; !slices.Equal(got, want) {
			t.Fatalf("group-commit statements %v, want %v", got, want)
		}
		for i := range rows {
			if got, want := mustSession(t, s, using[i].SessionID), settled(using[i].SessionID, 50, fins[i], false); got != want {
				t.Fatalf("row %d =\n %+v\nwant\n %+v", i, got, want)
			}
		}
	})
}

func TestFinishSessionSameRowConcurrently(t *testing.T) {
	const n = 20
	for _, opts := range []Options{{}, {BatchMaxRows: n, BatchMaxWait: time.Minute}} {
		t.Run(fmt.Sprintf("rows=%d", opts.BatchMaxRows), func(t *testing.T) {
			forEachBackend(t, opts, func(t *testing.T, s *Store) {
				// Straight to the table: a lone insert would wait out BatchMaxWait.
				if err := s.insertRows(testCtx(t), []quota.UsageRecord{usingRec("same", 100)}); err != nil {
					t.Fatal(err)
				}
				fins := make([]quota.UsageRecord, n)
				for i := range fins {
					fins[i] = finishRec("same", int64(i+1), 100-int64(i+1), 0, period.Add(time.Duration(i+1)*time.Minute))
				}
				for i, err := range finishAll(t, s, fins) {
					if err != nil {
						t.Fatalf("finish %d: %v", i, err)
					}
				}
				got := mustSession(t, s, "same")
				i := got.ChargedAmount - 1
				if i < 0 || i >= n || got != settled("same", 100, fins[i], false) {
					t.Fatalf("row = %+v; want it settled by exactly one of the finishes", got)
				}
				mustTotals(t, s, quota.PeriodTotals{Charged: got.ChargedAmount})
			})
		})
	}
}

// TestFinishRowsDuplicateKeepsFirst checks the statement itself: a session
// repeated in one batch is settled with its first record.
func TestFinishRowsDuplicateKeepsFirst(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		mustInsert(t, s, usingRec("d-1", 10), usingRec("d-2", 20))
		end := period.Add(time.Hour)
		recs := []quota.UsageRecord{
			finishRec("d-1", 3, 7, 0, end),
			finishRec("d-2", 25, 0, 5, end),
			finishRec("d-1", 9, 1, 0, end.Add(time.Minute)),
			finishRec("d-2", 1, 19, 0, end),
			finishRec("d-1", 4, 6, 0, end),
		}
		if err := s.finishRows(testCtx(t), recs); err != nil {
			t.Fatal(err)
		}
		if got, want := mustSession(t, s, "d-1"), settled("d-1", 10, recs[0], false); got != want {
			t.Fatalf("d-1 =\n %+v\nwant\n %+v", got, want)
		}
		if got, want := mustSession(t, s, "d-2"), settled("d-2", 20, recs[1], false); got != want {
			t.Fatalf("d-2 =\n %+v\nwant\n %+v", got, want)
		}
	})
}

func TestFirstPerSession(t *testing.T) {
	r := func(id string, c int64) quota.UsageRecord { return quota.UsageRecord{SessionID: id, ChargedAmount: c} }
	cases := []struct {
		name string
		in   []quota.UsageRecord
		want []quota.UsageRecord
	}{
		{"none", nil, nil},
		{"distinct", []quota.UsageRecord{r("a", 1), r("b", 2)}, []quota.UsageRecord{r("a", 1), r("b", 2)}},
		{"repeats", []quota.UsageRecord{r("a", 1), r("b", 2), r("a", 3), r("c", 4), r("b", 5), r("a", 6)},
			[]quota.UsageRecord{r("a", 1), r("b", 2), r("c", 4)}},
		{"all the same", []quota.UsageRecord{r("a", 1), r("a", 2), r("a", 3)}, []quota.UsageRecord{r("a", 1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstPerSession(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("firstPerSession = %v; want %v", got, tc.want)
			}
		})
	}
}

// TestFinishSessionMixedBatch sends one full batch holding a USING row, a
// USING row whose caller reports a recovered leak, a LEAKED row, a FINISHED
// row and a missing one; each gets the one-row semantics.
func TestFinishSessionMixedBatch(t *testing.T) {
	const rows = 5
	forEachBackend(t, Options{BatchMaxRows: rows, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		insertAll(t, s, []quota.UsageRecord{
			usingRec("using", 100), usingRec("using-rec", 100), usingRec("leaked", 100), usingRec("finished", 100),
			usingRec("filler", 1),
		})
		if err := s.MarkLeaked(ctx, []quota.LeakedSession{{ResourceName: "gpu", SessionID: "leaked", EndTime: period.Add(time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		// "finished" and "filler" settle in one full batch of their own
		// (with three no-ops for the missing ids).
		first := finishRec("finished", 40, 60, 0, period.Add(time.Hour))
		errs := finishAll(t, s, []quota.UsageRecord{first, finishRec("filler", 1, 0, 0, period.Add(time.Hour)),
			finishRec("nope-1", 1, 0, 0, period), finishRec("nope-2", 1, 0, 0, period), finishRec("nope-3", 1, 0, 0, period)})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("first batch %d: %v", i, err)
			}
		}
		finishedBefore := mustSession(t, s, "finished")

		end := period.Add(2 * time.Hour)
		recovered := finishRec("using-rec", 70, 30, 0, end)
		recovered.LeakRecovered = true
		batch := []quota.UsageRecord{
			finishRec("using", 120, 0, 20, end),
			recovered,
			finishRec("leaked", 10, 90, 0, end),
			finishRec("finished", 99, 1, 0, end), // already settled: unchanged
			finishRec("missing", 5, 0, 0, end),   // no row: not created
		}
		for i, err := range finishAll(t, s, batch) {
			if err != nil {
				t.Fatalf("finish %s: %v", batch[i].SessionID, err)
			}
		}
		for _, tc := range []struct {
			id   string
			want quota.UsageRecord
		}{
			{"using", settled("using", 100, batch[0], false)},
			{"using-rec", settled("using-rec", 100, batch[1], true)},
			{"leaked", settled("leaked", 100, batch[2], true)},
			{"finished", finishedBefore},
		} {
			if got := mustSession(t, s, tc.id); got != tc.want {
				t.Fatalf("%s =\n %+v\nwant\n %+v", tc.id, got, tc.want)
			}
		}
		if _, err := s.Session(ctx, "missing"); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("missing session created: %v", err)
		}
		if n := countRows(t, s); n != 5 {
			t.Fatalf("%d rows; want 5", n)
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: 120 + 70 + 10 + 40 + 1})
	})
}

// poisonCharged makes the database reject any update that sets
// charged_amount to poison (a trigger), so that one row of a batch fails.
func poisonCharged(t *testing.T, s *Store, poison int64) {
	t.Helper()
	var ddl string
	switch s.dialect.name {
	case "mysql":
		ddl = fmt.Sprintf(`CREATE TRIGGER poison_charged BEFORE UPDATE ON quota_usage FOR EACH ROW
			BEGIN IF NEW.charged_amount = %d THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poisoned row'; END IF; END`, poison)
	default:
		ddl = fmt.Sprintf(`CREATE TRIGGER poison_charged BEFORE UPDATE ON quota_usage
			WHEN NEW.charged_amount = %d BEGIN SELECT RAISE(ABORT, 'poisoned row'); END`, poison)
	}
	if _, err := s.DB().ExecContext(testCtx(t), ddl); err != nil {
		t.Fatalf("create trigger: %v", err)
	}
}

// TestFinishSessionBatchFailureRetriesRowByRow: one row of a full batch is
// rejected by the database; the batch statement fails as a whole, and the
// row-by-row retry settles the others and fails only that row's caller.
func TestFinishSessionBatchFailureRetriesRowByRow(t *testing.T) {
	const rows, poison = 6, 4242
	forEachBackend(t, Options{BatchMaxRows: rows, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		using := make([]quota.UsageRecord, rows)
		fins := make([]quota.UsageRecord, rows)
		for i := range rows {
			using[i] = usingRec(fmt.Sprintf("p-%d", i), 10)
			fins[i] = finishRec(using[i].SessionID, int64(i), 10-int64(i), 0, period.Add(time.Hour))
		}
		fins[2].ChargedAmount = poison
		fins[4] = fins[1] // a repeat of another row's finish, in the same batch
		insertAll(t, s, using)
		poisonCharged(t, s, poison)

		errs := finishAll(t, s, fins)
		for i, err := range errs {
			switch {
			case i == 2:
				if err == nil || errors.Is(err, quota.ErrUnavailable) {
					t.Fatalf("poisoned row: err = %v; want a non-unavailable error", err)
				}
			case err != nil:
				t.Fatalf("row %d: %v", i, err)
			}
		}
		for i := range rows {
			want := settled(using[i].SessionID, 10, fins[i], false)
			switch i {
			case 2:
				want = using[2] // untouched
			case 4:
				want = using[4] // nobody finished p-4 (its slot repeated p-1)
			}
			if got := mustSession(t, s, using[i].SessionID); got != want {
				t.Fatalf("row %d =\n %+v\nwant\n %+v", i, got, want)
			}
		}
	})
}

func TestFinishSessionContextDone(t *testing.T) {
	forEachBackend(t, Options{BatchMaxRows: 2, BatchMaxWait: 50 * time.Millisecond}, func(t *testing.T, s *Store) {
		mustInsert(t, s, usingRec("done-ctx", 5), usingRec("waiting", 5), usingRec("company", 6))
		fin := finishRec("done-ctx", 1, 4, 0, period.Add(time.Hour))
		for _, tc := range []struct {
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
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := s.FinishSession(tc.ctx(), fin); !errors.Is(err, tc.wantIs) {
					t.Fatalf("err = %v; want %v", err, tc.wantIs)
				}
				if got := mustSession(t, s, "done-ctx"); got != usingRec("done-ctx", 5) {
					t.Fatalf("row settled despite a done ctx: %+v", got)
				}
			})
		}

		// Cancelled while waiting for company: the update is not sent, the
		// other one of the batch is.
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.FinishSession(ctx, finishRec("waiting", 1, 4, 0, period.Add(time.Hour))) }()
		cancel()
		company := finishRec("company", 2, 4, 0, period.Add(time.Hour))
		if err := s.FinishSession(testCtx(t), company); err != nil {
			t.Fatalf("company: %v", err)
		}
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting: err = %v; want context.Canceled", err)
		}
		if got := mustSession(t, s, "waiting"); got != usingRec("waiting", 5) {
			t.Fatalf("cancelled finish applied: %+v", got)
		}
		if got, want := mustSession(t, s, "company"), settled("company", 6, company, false); got != want {
			t.Fatalf("company =\n %+v\nwant\n %+v", got, want)
		}
	})
}

// TestFinishSessionUnavailableAnswersTheWholeBatch: with the pool closed
// under a full batch, every caller gets ErrUnavailable (no row-by-row retry
// against a dead database).
func TestFinishSessionUnavailableAnswersTheWholeBatch(t *testing.T) {
	const rows = 4
	forEachBackend(t, Options{BatchMaxRows: rows, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		fins := make([]quota.UsageRecord, rows)
		for i := range fins {
			fins[i] = finishRec(fmt.Sprintf("u-%d", i), 1, 0, 0, period)
		}
		if err := s.DB().Close(); err != nil {
			t.Fatal(err)
		}
		for i, err := range finishAll(t, s, fins) {
			if !errors.Is(err, quota.ErrUnavailable) {
				t.Fatalf("finish %d: err = %v; want ErrUnavailable", i, err)
			}
		}
	})
}
