package mysqlstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestOpenSessionsPageWalksEveryOpenRowOnce(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("paged-%d", time.Now().UnixNano())
		var recs []quota.UsageRecord
		var open []string
		for i := range 10 {
			r := usingRec(fmt.Sprintf("%s-%02d", res, i), 5)
			r.ResourceName = res
			recs = append(recs, r)
			if i%4 != 3 {
				open = append(open, r.SessionID)
			}
		}
		other := usingRec(res+"-other", 5)
		other.ResourceName = res + "x"
		insertAll(t, s, append(recs, other))
		for i, r := range recs {
			if i%4 == 3 { // settle every fourth: not open any more
				f := finishRec(r.SessionID, 5, 0, 0, period.Add(time.Hour))
				f.ResourceName = res
				if err := s.FinishSession(testCtx(t), f); err != nil {
					t.Fatal(err)
				}
			}
		}
		var got []string
		var after int64
		var sizes []int
		for {
			page, next, err := s.OpenSessionsPage(testCtx(t), res, after, 3)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(page))
			for _, r := range page {
				if r.ResourceName != res || r.Status != quota.StatusUsing {
					t.Fatalf("page row %+v", r)
				}
				got = append(got, r.SessionID)
			}
			if len(page) == 0 {
				if next != after {
					t.Fatalf("empty page moved the position from %d to %d", after, next)
				}
				break
			}
			if next <= after {
				t.Fatalf("position went from %d to %d", after, next)
			}
			after = next
		}
		slices.Sort(got)
		if !slices.Equal(got, open) || !slices.Equal(sizes, []int{3, 3, 2, 0}) {
			t.Fatalf("walked %v in pages %v, want %v in pages [3 3 2 0]", got, sizes, open)
		}
	})
}
