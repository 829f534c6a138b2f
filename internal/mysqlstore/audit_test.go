package mysqlstore

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestAuditRecordsAndLists(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		if got, err := s.ListAudit(ctx, quota.AuditFilter{}); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("empty log: %v, %v; want an empty non-nil list", got, err)
		}
		// Six entries: r1 gets 0, 2, 4; r2 gets 1, 3, 5.
		var want []quota.AuditEntry
		for i := range 6 {
			e := quota.AuditEntry{
				At:       t0.Add(time.Duration(i)*time.Second + 999*time.Microsecond),
				Actor:    fmt.Sprintf("actor-%d", i),
				Action:   quota.ActionPolicyPut,
				Resource: fmt.Sprintf("r%d", i%2+1),
				After:    json.RawMessage(fmt.Sprintf(`{"totalLimit":%d}`, i)),
			}
			if i >= 2 {
				e.Before = json.RawMessage(fmt.Sprintf(`{"totalLimit":%d}`, i-2))
			}
			if err := s.RecordAudit(ctx, e); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			e.At = e.At.Truncate(time.Millisecond)
			want = append(want, e)
		}

		all, err := s.ListAudit(ctx, quota.AuditFilter{})
		if err != nil || len(all) != 6 {
			t.Fatalf("list all: %d entries, %v", len(all), err)
		}
		t.Run("entries come back as written, newest first", func(t *testing.T) {
			for i, rec := range all {
				w := want[5-i]
				if i > 0 && rec.ID >= all[i-1].ID {
					t.Fatalf("ids not descending: %d then %d", all[i-1].ID, rec.ID)
				}
				if !rec.At.Equal(w.At) || rec.At.Location() != time.UTC || rec.Actor != w.Actor ||
					rec.Action != w.Action || rec.Resource != w.Resource ||
					string(rec.Before) != string(w.Before) || string(rec.After) != string(w.After) {
					t.Fatalf("entry %d = %+v, want %+v", i, rec, w)
				}
			}
		})
		t.Run("a nil before stays nil", func(t *testing.T) {
			if oldest := all[5]; oldest.Before != nil {
				t.Fatalf("before %q, want nil", oldest.Before)
			}
		})
		t.Run("limit and before page through", func(t *testing.T) {
			p1, err := s.ListAudit(ctx, quota.AuditFilter{Limit: 4})
			if err != nil || len(p1) != 4 || p1[0].ID != all[0].ID {
				t.Fatalf("page 1: %d entries, %v", len(p1), err)
			}
			p2, err := s.ListAudit(ctx, quota.AuditFilter{Limit: 4, BeforeID: p1[3].ID})
			if err != nil || len(p2) != 2 || p2[0].ID != all[4].ID || p2[1].ID != all[5].ID {
				t.Fatalf("page 2: %+v, %v", p2, err)
			}
		})
		t.Run("resource filters", func(t *testing.T) {
			r2, err := s.ListAudit(ctx, quota.AuditFilter{Resource: "r2"})
			if err != nil || len(r2) != 3 {
				t.Fatalf("r2: %d entries, %v", len(r2), err)
			}
			for i, rec := range r2 {
				if rec.Resource != "r2" || rec.Actor != fmt.Sprintf("actor-%d", 5-2*i) {
					t.Fatalf("r2 entry %d: %+v", i, rec)
				}
			}
			r1, err := s.ListAudit(ctx, quota.AuditFilter{Resource: "r1", BeforeID: all[1].ID, Limit: 1})
			if err != nil || len(r1) != 1 || r1[0].Actor != "actor-2" {
				t.Fatalf("r1 before %d: %+v, %v", all[1].ID, r1, err)
			}
		})
	})
}
