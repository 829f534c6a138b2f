package sdktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestAuditAndReconcileCalls: the client's Audit and Reconcile against the
// routes the server has (issue 14, item 7).
func TestAuditAndReconcileCalls(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		ctx := context.Background()
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeCount, TotalLimit: 10})
		if _, err := admin(t, s).PutPolicy(ctx, client.PolicySpec{ResourceName: r, QuotaType: client.QuotaTypeCount, TotalLimit: 20}); err != nil {
			t.Fatal(err)
		}
		entries, err := admin(t, s).Audit(ctx, client.AuditQuery{Resource: r, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Resource != r || entries[0].Action != "policy.put" || entries[0].At.IsZero() || len(entries[0].After) == 0 {
			t.Fatalf("newest audit entry: %+v", entries)
		}
		older, err := admin(t, s).Audit(ctx, client.AuditQuery{Resource: r, Before: entries[0].ID})
		if err != nil || len(older) != 1 || string(older[0].Before) != "null" {
			t.Fatalf("the page before: %+v, %v (want the creation, with before null)", older, err)
		}
		if _, err := admin(t, s).Audit(ctx, client.AuditQuery{Limit: 501}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("limit 501: %v, want ErrInvalidArgument", err)
		}
		var reports []client.ReconcileReport
		testenv.Eventually(t, 20*time.Second, "a reconcile pass that is not skipped", func() bool {
			reports, err = admin(t, s).Reconcile(ctx, r)
			return !errors.Is(err, client.ErrReconcileSkipped) // the interval job may hold the lock
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(reports) != 1 || reports[0].Resource != r || reports[0].PeriodStart.IsZero() {
			t.Fatalf("reconcile reports: %+v", reports)
		}
	})
}
