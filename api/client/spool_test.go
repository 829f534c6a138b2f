package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// downCenter answers every call 502, as a proxy before a stopped center.
func downCenter(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	t.Cleanup(s.Close)
	return s.URL
}

func spoolManager(t *testing.T, url, dir string, opts ...client.ManagerOption) *client.Manager {
	t.Helper()
	opts = append([]client.ManagerOption{quiet(), client.WithFailOpenSpool(dir), client.WithFallback("", client.FailOpen()),
		client.WithRetry(1, time.Millisecond, time.Millisecond), client.WithReportInterval(20 * time.Millisecond)}, opts...)
	m, err := client.NewManager(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.spool"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func centerUsed(f *fakeCenter) (used int64, open int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used, len(f.sessions)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A process that dies with fail-open usage unreported (one lease finished
// with 40, one still open with 10 granted) loses nothing: the next Manager
// on the spool charges 40 + 10 (the open lease's whole grant) once, and a
// third one finds nothing left to send.
func TestFailOpenSpoolSurvivesTheProcess(t *testing.T) {
	dir := t.TempDir()
	m1 := spoolManager(t, downCenter(t), dir)
	ctx := context.Background()
	if err := m1.Do(ctx, "r", 100, func(context.Context) (int64, error) { return 40, nil }); err != nil {
		t.Fatal(err)
	}
	l, err := m1.Acquire(ctx, "r", 10)
	if err != nil || !l.FailOpen() {
		t.Fatalf("Acquire with the center down: %v (fail-open %v)", err, l != nil && l.FailOpen())
	}
	client.Abandon(m1) // dies: nothing finished, nothing sent

	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m2 := spoolManager(t, center.URL, dir)
	eventually(t, "the adopted reports to be delivered", func() bool { return m2.PendingReports() == 0 })
	if used, open := centerUsed(center); used != 50 || open != 0 {
		t.Fatalf("center used %d with %d open sessions, want 50 (40 reported + the open lease's grant of 10) and 0", used, open)
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Fatalf("spool files left after every report was delivered: %v", files)
	}
	m3 := spoolManager(t, center.URL, dir)
	if n := m3.PendingReports(); n != 0 {
		t.Fatalf("a third Manager found %d reports to send", n)
	}
	if err := m3.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ := centerUsed(center); used != 50 {
		t.Fatalf("center used %d after a third Manager, want 50: a report was charged twice", used)
	}
}

// Close with the center still away keeps the reports in the spool for the
// next Manager, and the error says so.
func TestFailOpenSpoolKeepsWhatCloseCouldNotSend(t *testing.T) {
	dir := t.TempDir()
	m1 := spoolManager(t, downCenter(t), dir)
	ctx := context.Background()
	if err := m1.Do(ctx, "r", 100, func(context.Context) (int64, error) { return 7, nil }); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := m1.Close(cctx); err == nil || !strings.Contains(err.Error(), "for the next Manager") {
		t.Fatalf("Close with a report undelivered: %v, want an error saying the spool keeps it", err)
	}
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m2 := spoolManager(t, center.URL, dir)
	defer m2.Close(ctx)
	eventually(t, "the kept report to be delivered", func() bool { return m2.PendingReports() == 0 })
	if used, _ := centerUsed(center); used != 7 {
		t.Fatalf("center used %d, want 7", used)
	}
}

// A live Manager's spool is its own: another Manager on the same dir does
// not send its reports (it would race the owner).
func TestFailOpenSpoolOfALiveManagerIsNotAdopted(t *testing.T) {
	dir := t.TempDir()
	m1 := spoolManager(t, downCenter(t), dir)
	ctx := context.Background()
	if err := m1.Do(ctx, "r", 100, func(context.Context) (int64, error) { return 5, nil }); err != nil {
		t.Fatal(err)
	}
	owned := m1.PendingReports() // the usage, and the apply whose 502 answer may hide a session
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m2 := spoolManager(t, center.URL, dir)
	if n := m2.PendingReports(); n != 0 {
		t.Fatalf("the second Manager took %d reports of a live one", n)
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ := centerUsed(center); used != 0 {
		t.Fatalf("center charged %d from a live Manager's spool", used)
	}
	if n := m1.PendingReports(); n != owned || n == 0 {
		t.Fatalf("the owner has %d reports, want its %d", n, owned)
	}
	client.Abandon(m1)
}

// A spool file cut mid-line by a crash, with a report delivered (done) and
// one unreadable line, replays what is readable and undelivered.
func TestFailOpenSpoolSkipsATornLine(t *testing.T) {
	dir := t.TempDir()
	body := `{"op":"report","id":"a","resource":"r","apply":3,"used":3}
{"op":"report","id":"b","resource":"r","apply":4,"used":4}
{"op":"done","id":"a"}
{"op":"open","id":"c","resource":"r","apply":9}
{"op":"report","id":"c","resource":"r","apply":2,"used":2}
{"op":"report","id":"d","reso`
	if err := os.WriteFile(filepath.Join(dir, "0-dead.spool"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m := spoolManager(t, center.URL, dir)
	defer m.Close(context.Background())
	if n := m.PendingReports(); n != 2 {
		t.Fatalf("adopted %d reports, want 2 (b, and c's finished usage)", n)
	}
	eventually(t, "the reports to be delivered", func() bool { return m.PendingReports() == 0 })
	if used, _ := centerUsed(center); used != 6 {
		t.Fatalf("center used %d, want 4 + 2", used)
	}
}

func TestFailOpenSpoolOptionIsChecked(t *testing.T) {
	if _, err := client.NewManager("http://127.0.0.1:1", client.WithFailOpenSpool(" ")); err == nil || !strings.Contains(err.Error(), "WithFailOpenSpool") {
		t.Errorf("empty dir: %v", err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewManager("http://127.0.0.1:1", client.WithFailOpenSpool(file)); err == nil || !strings.Contains(err.Error(), "WithFailOpenSpool") {
		t.Errorf("a file as the dir: %v", err)
	}
}

// A LocalPool serving at its outage safe rate spools what it hands out
// (every second), so a process that dies in the outage loses none of it
// once the spool has caught up: the next Manager charges it once.
func TestFailOpenSpoolKeepsThePoolsSafeRateUsage(t *testing.T) {
	dir := t.TempDir()
	m1 := spoolManager(t, downCenter(t), dir)
	p, err := m1.LocalPool("r", client.WithOutage(client.OutageSafeRate, 1000), client.WithIdleReturn(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var handed int64 // served at the safe rate (the center is away from the start: no batch)
	eventually(t, "25 units at the safe rate", func() bool {
		if p.TryTake(1) {
			handed++
		}
		return handed >= 25 && p.Mode() == "safe_rate"
	})
	spooled := func() int64 { // the last safe-rate total in the spool
		t.Helper()
		files := spoolFiles(t, dir)
		if len(files) != 1 {
			return -1
		}
		b, _ := os.ReadFile(files[0])
		var last int64 = -1
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `"op":"report"`) && !strings.Contains(l, `"orphan":true`) {
				var r struct{ Used int64 }
				if json.Unmarshal([]byte(l), &r) == nil {
					last = r.Used
				}
			}
		}
		return last
	}
	eventually(t, "the safe-rate usage in the spool", func() bool { return spooled() == handed })
	client.Abandon(m1)

	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m2 := spoolManager(t, center.URL, dir)
	defer m2.Close(context.Background())
	eventually(t, "the safe-rate usage to be charged", func() bool { return m2.PendingReports() == 0 })
	if used, _ := centerUsed(center); used != handed {
		t.Fatalf("center used %d, want the %d handed out at the safe rate", used, handed)
	}
}
