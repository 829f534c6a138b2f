package sdktest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

const spoolHelperEnv = "QC_SDKTEST_SPOOL_CHILD"

// TestFailOpenSpoolChild is the child of
// TestFailOpenUsageSurvivesAKilledProcessThroughTheSpool: with the center
// away it uses a fail-open resource (one lease finished with 40, one of 10
// left open), says so, and waits to be killed.
func TestFailOpenSpoolChild(t *testing.T) {
	arg := os.Getenv(spoolHelperEnv)
	if arg == "" {
		t.Skip("helper process of TestFailOpenUsageSurvivesAKilledProcessThroughTheSpool")
	}
	var url, r, dir string
	if _, err := fmt.Sscanf(arg, "%s %s %s", &url, &r, &dir); err != nil {
		t.Fatal(err)
	}
	m, err := client.NewManager(url, client.WithFailOpenSpool(dir), client.WithFallback(r, client.FailOpen()),
		client.WithRetry(1, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Do(ctx, r, 100, func(context.Context) (int64, error) { return 40, nil }); err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx, r, 10)
	if err != nil || !l.FailOpen() {
		t.Fatalf("acquire: %v", err)
	}
	fmt.Printf("SPOOLED %d\n", m.PendingReports())
	time.Sleep(time.Minute)
}

// TestFailOpenUsageSurvivesAKilledProcessThroughTheSpool: fail-open usage
// while the center is away, the process SIGKILLed before the center is
// back, a new Manager on the same spool once it is back (with the answers
// of its first finishes lost): the center charges exactly 40 + 10 (the
// lease left open is charged its whole grant), and a third Manager on the
// spool charges nothing more.
func TestFailOpenUsageSurvivesAKilledProcessThroughTheSpool(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 1000})
		p := newProxy(t, s.URL)
		p.down.Store(true)
		dir := t.TempDir()
		kid := startChild(t, "TestFailOpenSpoolChild", spoolHelperEnv+"="+p.URL+" "+r+" "+dir)
		kid.waitLine(t, "SPOOLED ")
		kid.kill() // SIGKILL: no Close, nothing sent
		if st := status(t, s, r); st.UsedAmount != 0 || st.ActiveSessions != 0 {
			t.Fatalf("the center saw the child's usage while away: %+v", st)
		}

		p.down.Store(false)
		for range 4 { // the first finishes reach the center, their answers are lost
			p.add(rule{path: "/quota/finish", dropAnswer: true})
		}
		m := manager(t, p.URL, client.WithFailOpenSpool(dir), client.WithRetry(1, time.Millisecond, time.Millisecond),
			client.WithBreaker(100, time.Second), client.WithReportInterval(50*time.Millisecond))
		testenv.Eventually(t, 20*time.Second, "the dead process's reports to be delivered", func() bool { return m.PendingReports() == 0 })
		st := status(t, s, r)
		if st.UsedAmount != 50 || st.ReservedAmount != 0 || st.ActiveSessions != 0 {
			t.Fatalf("status after the replay: %+v, want used 50 exactly (40 finished + the open lease's 10)", st)
		}
		if n := ledgerRows(t, s, r, "FINISHED"); n != 2 {
			t.Fatalf("%d FINISHED ledger rows, want 2 (one per fail-open lease)", n)
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		m3 := manager(t, p.URL, client.WithFailOpenSpool(dir))
		if n := m3.PendingReports(); n != 0 {
			t.Fatalf("a third Manager found %d reports in the spool", n)
		}
		if st := status(t, s, r); st.UsedAmount != 50 {
			t.Fatalf("used %d after a third Manager, want 50", st.UsedAmount)
		}
	})
}
