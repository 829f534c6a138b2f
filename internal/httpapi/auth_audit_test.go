package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

type auditJSON struct {
	ID       int64           `json:"id"`
	At       string          `json:"at"`
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	Resource string          `json:"resource"`
	Before   json.RawMessage `json:"before"`
	After    json.RawMessage `json:"after"`
}

func auditEntries(t *testing.T, r authReply) []auditJSON {
	t.Helper()
	var out struct {
		Success bool        `json:"success"`
		Code    string      `json:"code"`
		Entries []auditJSON `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.raw), &out); err != nil || !out.Success || out.Code != CodeSuccess || out.Entries == nil {
		t.Fatalf("audit body %s: %v", r.raw, err)
	}
	return out.Entries
}

func limitOf(t *testing.T, raw json.RawMessage) int64 {
	t.Helper()
	var p struct{ TotalLimit int64 }
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("policy JSON %s: %v", raw, err)
	}
	return p.TotalLimit
}

func TestPolicyChangesAreAudited(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	e.call(t, http.MethodPut, "/admin/policies/res-a", `{"quotaType":"TOKENS","totalLimit":1000}`, bearer(aliceToken)...).
		want(t, http.StatusCreated, "")
	e.call(t, http.MethodPut, "/admin/policies/res-a", `{"quotaType":"TOKENS","totalLimit":2000}`, bearer(bobToken)...).
		want(t, http.StatusOK, "")

	r := e.call(t, http.MethodGet, "/admin/audit", "", bearer(aliceToken)...)
	r.want(t, http.StatusOK, "")
	got := auditEntries(t, r)
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2: %s", len(got), r.raw)
	}
	upd, cre := got[0], got[1]
	t.Run("newest first", func(t *testing.T) {
		if upd.ID <= cre.ID {
			t.Fatalf("ids %d, %d: want descending", upd.ID, cre.ID)
		}
	})
	t.Run("the create has a null before and the creator as actor", func(t *testing.T) {
		if cre.Actor != "alice" || cre.Action != quota.ActionPolicyPut || cre.Resource != "res-a" ||
			string(cre.Before) != "null" || limitOf(t, cre.After) != 1000 {
			t.Fatalf("create entry %+v", cre)
		}
	})
	t.Run("the update has the old policy as before", func(t *testing.T) {
		if upd.Actor != "bob" || upd.Action != quota.ActionPolicyPut || upd.Resource != "res-a" ||
			limitOf(t, upd.Before) != 1000 || limitOf(t, upd.After) != 2000 {
			t.Fatalf("update entry %+v", upd)
		}
	})
	t.Run("at is RFC 3339 UTC with milliseconds", func(t *testing.T) {
		for _, en := range got {
			if len(en.At) != len("2006-01-02T15:04:05.000Z") || !strings.HasSuffix(en.At, "Z") {
				t.Fatalf("at %q", en.At)
			}
		}
	})
	t.Run("the policy's timestamps in before and after have milliseconds too", func(t *testing.T) {
		for _, raw := range []json.RawMessage{upd.Before, upd.After, cre.After} {
			var p struct{ CreatedAt, UpdatedAt string }
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			for _, ts := range []string{p.CreatedAt, p.UpdatedAt} {
				if len(ts) != len("2006-01-02T15:04:05.000Z") || !strings.HasSuffix(ts, "Z") {
					t.Fatalf("timestamp %q in %s", ts, raw)
				}
			}
		}
	})
	t.Run("a refused PUT is not audited", func(t *testing.T) {
		e.call(t, http.MethodPut, "/admin/policies/res-a", `{"quotaType":"NOPE","totalLimit":5}`, bearer(aliceToken)...).
			want(t, http.StatusBadRequest, CodeInvalidArgument)
		if n := len(auditEntries(t, e.call(t, http.MethodGet, "/admin/audit", "", bearer(aliceToken)...))); n != 2 {
			t.Fatalf("%d entries after a refused PUT, want 2", n)
		}
	})
}

func TestAuditPagesAndFilters(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	// Seven changes: res-a at limits 1..4, res-b at 1..3, interleaved.
	for i := 1; i <= 4; i++ {
		e.call(t, http.MethodPut, "/admin/policies/res-a", fmt.Sprintf(`{"quotaType":"COUNT","totalLimit":%d}`, i), bearer(aliceToken)...).want(t, okStatus(i), "")
		if i <= 3 {
			e.call(t, http.MethodPut, "/admin/policies/res-b", fmt.Sprintf(`{"quotaType":"COUNT","totalLimit":%d}`, i), bearer(bobToken)...).want(t, okStatus(i), "")
		}
	}
	list := func(query string) []auditJSON {
		t.Helper()
		r := e.call(t, http.MethodGet, "/admin/audit"+query, "", bearer(aliceToken)...)
		r.want(t, http.StatusOK, "")
		return auditEntries(t, r)
	}
	all := list("")
	if len(all) != 7 {
		t.Fatalf("%d entries, want 7", len(all))
	}
	t.Run("pages of 3 walk everything once, newest first", func(t *testing.T) {
		var walked []auditJSON
		query := "?limit=3"
		for range 10 {
			page := list(query)
			walked = append(walked, page...)
			if len(page) < 3 {
				break
			}
			query = fmt.Sprintf("?limit=3&before=%d", page[len(page)-1].ID)
		}
		if len(walked) != len(all) {
			t.Fatalf("walked %d entries, want %d", len(walked), len(all))
		}
		for i := range all {
			if walked[i].ID != all[i].ID {
				t.Fatalf("entry %d: id %d, want %d", i, walked[i].ID, all[i].ID)
			}
			if i > 0 && all[i].ID >= all[i-1].ID {
				t.Fatalf("ids not descending: %d then %d", all[i-1].ID, all[i].ID)
			}
		}
	})
	t.Run("resource filters by resource", func(t *testing.T) {
		a := list("?resource=res-a")
		if len(a) != 4 {
			t.Fatalf("%d res-a entries, want 4", len(a))
		}
		for i, en := range a {
			if en.Resource != "res-a" || limitOf(t, en.After) != int64(4-i) {
				t.Fatalf("entry %d: %+v", i, en)
			}
		}
		b := list(fmt.Sprintf("?resource=res-b&limit=1&before=%d", all[0].ID))
		if len(b) != 1 || b[0].Resource != "res-b" || limitOf(t, b[0].After) != 3 {
			t.Fatalf("res-b page %+v", b)
		}
		if n := len(list("?resource=never-changed")); n != 0 {
			t.Fatalf("%d entries for an unknown resource", n)
		}
	})
	t.Run("before the oldest id is empty", func(t *testing.T) {
		if n := len(list(fmt.Sprintf("?before=%d", all[len(all)-1].ID))); n != 0 {
			t.Fatalf("%d entries", n)
		}
	})
	tests := []struct{ name, query string }{
		{"limit 0", "?limit=0"},
		{"limit 501", "?limit=501"},
		{"a negative limit", "?limit=-1"},
		{"a limit that is no number", "?limit=ten"},
		{"a limit with a plus sign", "?limit=+5"},
		{"a limit with leading zeros", "?limit=05"},
		{"a limit past int64", "?limit=99999999999999999999"},
		{"before 0", "?before=0"},
		{"a negative before", "?before=-3"},
		{"a before that is no number", "?before=x"},
		{"an unknown parameter", "?resourceId=res-a"},
		{"both names of the resource", "?resourceName=res-a&resource=res-a"},
		{"a repeated parameter", "?limit=1&limit=2"},
		{"a malformed resource", "?resource=Res%20A"},
		{"an empty resource", "?resource="},
		{"a malformed query string", "?limit=%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is 400", func(t *testing.T) {
			e.call(t, http.MethodGet, "/admin/audit"+tt.query, "", bearer(aliceToken)...).want(t, http.StatusBadRequest, CodeInvalidArgument)
		})
	}
}

func okStatus(i int) int {
	if i == 1 {
		return http.StatusCreated
	}
	return http.StatusOK
}

// failingAudit is an audit log whose writes fail.
type failingAudit struct{}

func (failingAudit) RecordAudit(context.Context, quota.AuditEntry) error {
	return errors.New("disk full")
}

func (failingAudit) ListAudit(context.Context, quota.AuditFilter) ([]quota.AuditRecord, error) {
	return nil, nil
}

func TestAFailedAuditWriteAnswers503AndARetryAuditsAgain(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth(), audit: failingAudit{}})
	r := e.call(t, http.MethodPut, "/admin/policies/res-a", policyBody, bearer(aliceToken)...)
	r.want(t, http.StatusServiceUnavailable, CodeBackendUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// The change itself is stored, as documented.
	e.call(t, http.MethodGet, "/admin/policies/res-a", "", bearer(aliceToken)...).want(t, http.StatusOK, "")
}
