package httpapi

import (
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestParseAuditQueryAnswersTheWireMessages(t *testing.T) {
	const (
		badLimit    = "invalid limit: must be a whole number from 1 to 500"
		badBefore   = "invalid before: must be an audit entry id (a whole number, at least 1)"
		badResource = ": must be 1 to 64 characters of [a-z0-9_.-]"
	)
	tests := []struct {
		give    string
		want    quota.AuditFilter
		wantErr string
	}{
		{"", quota.AuditFilter{Limit: 100}, ""},
		{"resourceName=gpu&limit=500&before=9", quota.AuditFilter{Resource: "gpu", Limit: 500, BeforeID: 9}, ""},
		{"resource=gpu&limit=1", quota.AuditFilter{Resource: "gpu", Limit: 1}, ""},
		{"limit=ten", quota.AuditFilter{}, badLimit},
		{"limit=0", quota.AuditFilter{}, badLimit},
		{"limit=501", quota.AuditFilter{}, badLimit},
		{"limit=99999999999999999999", quota.AuditFilter{}, badLimit},
		{"before=0", quota.AuditFilter{}, badBefore},
		{"before=-3", quota.AuditFilter{}, badBefore},
		{"resourceName=Res%20A", quota.AuditFilter{}, "invalid resourceName" + badResource},
		{"resource=", quota.AuditFilter{}, "invalid resource" + badResource},
		{"resource=...", quota.AuditFilter{}, "invalid resource" + badResource},
		{"resourceId=x", quota.AuditFilter{}, "invalid resourceId: is not a known query parameter (resourceName, actor, action, limit, before)"},
		{"actor=ops-alice&action=reclaim.confirm", quota.AuditFilter{Actor: "ops-alice", Action: "reclaim.confirm", Limit: 100}, ""},
		{"actor=", quota.AuditFilter{}, "invalid actor: must not be empty (leave it out for any)"},
		{"action=", quota.AuditFilter{}, "invalid action: must not be empty (leave it out for any)"},
		{"actor=a%07b", quota.AuditFilter{}, "invalid actor: must be 1 to 128 characters without control characters"},
		{"action=Policy.Put", quota.AuditFilter{}, "invalid action: must be 1 to 64 characters of [a-z0-9_.], e.g. policy.put"},
		{"action=a&action=b", quota.AuditFilter{}, "invalid action: is given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := parseAuditQuery(tt.give)
			switch {
			case tt.wantErr != "":
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Fatalf("parseAuditQuery = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
