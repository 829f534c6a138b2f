package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/app"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// childArgsEnv, when set in the environment, makes this test binary run
// quota-center (app.Serve with these JSON-encoded arguments) instead of the
// tests: the durability test starts it as a separate process so that it can
// kill it with SIGKILL. The bound address is written to the file named by
// childAddrEnv.
const (
	childArgsEnv = "QC_TEST_CHILD_SERVE_ARGS"
	childAddrEnv = "QC_TEST_CHILD_ADDR_FILE"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgsEnv); raw != "" {
		os.Exit(serveChild(raw, os.Getenv(childAddrEnv)))
	}
	os.Exit(m.Run())
}

func serveChild(raw, addrFile string) int {
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "child: bad arguments:", err)
		return 2
	}
	err := app.Serve(context.Background(), args, os.Stderr, func(a string) {
		_ = os.WriteFile(addrFile+".tmp", []byte(a), 0o644)
		_ = os.Rename(addrFile+".tmp", addrFile)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// TestAnsweredApplyIsDurableAndSurvivesAKill holds issue 11's "answered only
// after its row is durable" under the adaptive group commit: quota-center
// runs as a separate process while 24 clients apply as fast as they can;
// every apply answered 200 must have its ledger row readable on another
// connection the moment the answer arrives (nothing is written after the
// answer), and after quota-center is killed with SIGKILL in the middle of
// the load, every answered session is still in the ledger (the crash loses
// no answered row). Applies in flight at the kill get no answer and may or
// may not have a row; they are not counted.
func TestAnsweredApplyIsDurableAndSurvivesAKill(t *testing.T) {
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) { testDurableAcrossKill(t, mode, false) })
	}
}

// TestAnsweredFinishIsDurableAndSurvivesAKill is the same proof for whole
// sessions, whose inserts and finishes share group-commit transactions
// (internal/mysqlstore together.go): each of 24 clients applies, then
// finishes what it was granted, as fast as it can. Every apply answered 200
// must have its row, and every finish answered 200 its row FINISHED,
// readable on another connection when the answer arrives, and still so
// after quota-center is killed with SIGKILL in the middle of the load.
func TestAnsweredFinishIsDurableAndSurvivesAKill(t *testing.T) {
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) { testDurableAcrossKill(t, mode, true) })
	}
}

// testDurableAcrossKill runs the load of the tests above: applies only, or,
// with sessions, each apply followed by its finish.
func testDurableAcrossKill(t *testing.T, mode testenv.Mode, sessions bool) {
	dir := t.TempDir()
	token := "durable-admin-" + testenv.RandomSuffix() + testenv.RandomSuffix()
	args := []string{"--http-addr", "127.0.0.1:0", "--log-level", "warn", "--admin-tokens", "durable:" + token}
	var ledger *sqlx.DB
	var err error
	if mode == testenv.Real || mode == testenv.Cluster {
		dsn := testenv.MustMySQL(t)
		args = append(args, testenv.RedisArgs(t, mode)...)
		args = append(args, "--mysql-dsn", dsn, "--migrate-on-start", "--insecure-open-quota")
		ledger, err = sqlx.Open("mysql", dsn)
	} else {
		path := filepath.Join(dir, "ledger.db")
		args = append(args, "--dev-sqlite-path", path)
		ledger, err = sqlx.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&mode=ro")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	resource := testenv.Resource(t)

	url, cmd, exited := startChild(t, dir, args)

	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, auth, body string) (int, []byte, error) {
		method := http.MethodPost
		if strings.HasPrefix(path, "/admin/") {
			method = http.MethodPut
		}
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	code, body, err := post("/admin/policies/"+resource, token,
		`{"quotaType":"COUNT","totalLimit":1000000000,"leakThresholdSeconds":3600}`)
	if err != nil || (code != http.StatusOK && code != http.StatusCreated) {
		t.Fatalf("put policy: %d %s %v", code, body, err)
	}

	// rowExists reads the ledger on its own connection: whether the row of
	// id is there (with finished, whether it is FINISHED).
	rowIs := func(id string, finished bool) (bool, error) {
		q := `SELECT COUNT(*) FROM quota_usage WHERE session_id = ? AND resource_name = ?`
		if finished {
			q += ` AND status = 'FINISHED'`
		}
		var n int
		err := ledger.QueryRow(q, id, resource).Scan(&n)
		return n == 1, err
	}
	rowExists := func(id string) (bool, error) { return rowIs(id, false) }

	const workers, killAfter = 24, 400
	var (
		mu        sync.Mutex
		answered  []string
		notYet    []string // answered 200 while the row was not readable yet
		finished  []string // sessions whose finish answered 200
		unsettled []string // finish answered 200 while the row was not FINISHED yet
		count     atomic.Int64
		killed    = make(chan struct{})
		killOnce  sync.Once
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-killed:
					return
				default:
				}
				id := fmt.Sprintf("durable-%d-%d", w, i)
				code, _, err := post("/quota/apply", "", fmt.Sprintf(
					`{"resourceName":%q,"applyAmount":1,"sessionId":%q}`, resource, id))
				if err != nil || code != http.StatusOK {
					continue // in flight at the kill (or refused): no answer to hold it to
				}
				ok, qerr := rowExists(id)
				if qerr != nil {
					t.Errorf("read the ledger: %v", qerr)
					return
				}
				mu.Lock()
				answered = append(answered, id)
				if !ok {
					notYet = append(notYet, id)
				}
				mu.Unlock()
				if sessions {
					if err := finishDurably(post, rowIs, resource, id, &mu, &finished, &unsettled); err != nil {
						t.Errorf("%v", err)
						return
					}
				}
				if count.Add(1) >= killAfter {
					killOnce.Do(func() {
						// Kill while the other workers' applies are in flight.
						_ = cmd.Process.Signal(syscall.SIGKILL)
						<-exited
						close(killed)
					})
				}
			}
		})
	}
	wg.Wait()
	if len(notYet) > 0 {
		t.Fatalf("%d of %d applies answered 200 before their ledger row was readable, e.g. %v",
			len(notYet), len(answered), notYet[:min(5, len(notYet))])
	}
	var missing []string
	for _, id := range answered {
		ok, err := rowExists(id)
		if err != nil {
			t.Fatalf("read the ledger after the kill: %v", err)
		}
		if !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("after SIGKILL, %d of %d answered applies have no ledger row, e.g. %v",
			len(missing), len(answered), missing[:min(5, len(missing))])
	}
	if len(unsettled) > 0 {
		t.Fatalf("%d of %d finishes answered 200 before their row was FINISHED, e.g. %v",
			len(unsettled), len(finished), unsettled[:min(5, len(unsettled))])
	}
	for _, id := range finished {
		if ok, err := rowIs(id, true); err != nil || !ok {
			t.Fatalf("after SIGKILL, the row of answered finish %s is not FINISHED (%v); %d finishes answered", id, err, len(finished))
		}
	}
	if sessions && len(finished) < killAfter/2 {
		t.Fatalf("only %d finishes answered before the kill, want at least %d", len(finished), killAfter/2)
	}
	if len(answered) < killAfter {
		t.Fatalf("only %d applies answered before the kill, want at least %d", len(answered), killAfter)
	}
	t.Logf("%d applies and %d finishes answered 200; each row was readable (finishes: FINISHED) at its answer and all survived SIGKILL",
		len(answered), len(finished))
}

// finishDurably finishes session id (actual use 1) and, when it answered
// 200, appends id to finished, and to unsettled when rowIs does not find
// its row FINISHED at once. A finish in flight at the kill has no answer
// and is not counted. Errors: the ledger read's.
func finishDurably(post func(path, auth, body string) (int, []byte, error), rowIs func(string, bool) (bool, error),
	resource, id string, mu *sync.Mutex, finished, unsettled *[]string,
) error {
	code, _, err := post("/quota/finish", "", fmt.Sprintf(
		`{"resourceName":%q,"sessionId":%q,"actualUsedAmount":1}`, resource, id))
	if err != nil || code != http.StatusOK {
		return nil
	}
	ok, err := rowIs(id, true)
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	*finished = append(*finished, id)
	if !ok {
		*unsettled = append(*unsettled, id)
	}
	return nil
}

// startChild runs quota-center serve with args as a child process of this
// test binary (serveChild), its address file under dir, and waits until it
// listens. It answers its base URL, the process and a channel closed when
// it has exited; the child is killed when the test ends, and its log is
// printed if the test failed.
func startChild(t *testing.T, dir string, args []string) (string, *exec.Cmd, chan struct{}) {
	t.Helper()
	raw, _ := json.Marshal(args)
	addrFile := filepath.Join(dir, "addr")
	var childLog bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(raw), childAddrEnv+"="+addrFile)
	cmd.Stdout, cmd.Stderr = &childLog, &childLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("quota-center's log:\n%s", childLog.String())
		}
	})
	var url string
	testenv.Eventually(t, 60*time.Second, "quota-center to listen", func() bool {
		b, err := os.ReadFile(addrFile)
		url = "http://" + string(b)
		return err == nil
	})
	return url, cmd, exited
}
