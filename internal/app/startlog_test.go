package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/app"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// logEntries decodes the JSON log lines whose msg is msg.
func logEntries(t *testing.T, text, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// The start-up log writes durations as Go does ("5s"), not nanoseconds.
func TestStartLogWritesDurationsReadably(t *testing.T) {
	logs := &lockedBuffer{}
	testenv.StartLogged(t, testenv.Dev, logs, "--log-level", "info", "--shutdown-grace", "15s", "--redis-timeout", "500ms")
	start := logEntries(t, logs.String(), "starting")
	if len(start) != 1 {
		t.Fatalf("%d starting lines in:\n%s", len(start), logs.String())
	}
	cfg, _ := start[0]["config"].(map[string]any)
	redis, _ := cfg["Redis"].(map[string]any)
	httpc, _ := cfg["HTTP"].(map[string]any)
	for name, got := range map[string]any{
		"ShutdownGrace": cfg["ShutdownGrace"], "Redis.Timeout": redis["Timeout"], "HTTP.IdleTimeout": httpc["IdleTimeout"],
	} {
		want := map[string]string{"ShutdownGrace": "15s", "Redis.Timeout": "500ms", "HTTP.IdleTimeout": "2m0s"}[name]
		if got != want {
			t.Errorf("config %s logged as %v (%T), want %q", name, got, got, want)
		}
	}
	if httpc["Addr"] != "127.0.0.1:0" {
		t.Errorf("HTTP.Addr logged as %v", httpc["Addr"])
	}
}

// The sweeper's "session leaked" line names the client that held it.
func TestLeakLogNamesTheClient(t *testing.T) {
	logs := &lockedBuffer{}
	s := testenv.StartLogged(t, testenv.Dev, logs, "--log-level", "info")
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10, "leakThresholdSeconds": 1})
	code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 2, "clientId": "report-svc"})
	if code != http.StatusOK {
		t.Fatalf("apply: %d %v", code, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, l := range logEntries(t, logs.String(), "session leaked") {
			if l["resource"] == res {
				if l["client_id"] != "report-svc" || l["session_id"] != out["sessionId"] {
					t.Fatalf("leak line %v, want client_id report-svc and session %v", l, out["sessionId"])
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leak line for %s within 15s:\n%s", res, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A production configuration without API keys does not start unless
// QC_INSECURE_OPEN_QUOTA says so.
func TestProductionWithoutAPIKeysRefusesToStart(t *testing.T) {
	err := app.Serve(context.Background(), []string{"--http-addr", "127.0.0.1:0",
		"--redis-addr", "127.0.0.1:1", "--mysql-dsn", "u@tcp(127.0.0.1:1)/x"}, &lockedBuffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "QC_INSECURE_OPEN_QUOTA=true") {
		t.Fatalf("Serve: %v", err)
	}
}
