package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// A fail-open report is an apply and a finish: a center that answers each
// in 60 ms takes 120 ms a report, more than the 100 ms report interval. The
// report rounds must still deliver it (each round used to be bounded by the
// interval, so every round cancelled its report and it stayed pending for
// as long as the center stayed that slow).
func TestAReportSlowerThanTheReportIntervalIsDelivered(t *testing.T) {
	o := newOutage(t)
	inner := o.Config.Handler
	o.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !o.down.Load() {
			time.Sleep(60 * time.Millisecond)
		}
		inner.ServeHTTP(w, r)
	})
	m, _ := failOpenDuringOutage(t, o, client.WithReportInterval(100*time.Millisecond))
	defer m.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second) // a bound for a broken build, not a speed
	for m.PendingReports() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the center returned (60 ms an answer): %d reports pending", m.PendingReports())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
