package redisstore

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// A swept session names the client that applied for it, fresh or reported
// again while its ledger row is not acknowledged (the sweeper logs it).
func TestSweptSessionsNameTheirClient(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		c := e.cmd("gone", 10, 0, per)
		c.ClientID = "report-svc"
		c.Lease = time.Millisecond
		e.grant(t, c, 10)
		l, _ := e.waitSwept(t, "gone")
		if l.ClientID != "report-svc" || l.Granted != 10 {
			t.Fatalf("swept %+v, want client report-svc granted 10", l)
		}
		again := e.sweep(t, 10) // not acknowledged: reported again, not fresh
		if len(again) != 1 || again[0].Fresh || again[0].ClientID != "report-svc" {
			t.Fatalf("second sweep %+v", again)
		}
	})
}
