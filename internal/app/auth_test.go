package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// lockedBuffer collects the server's log; the server writes from many
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// send makes one request with the given headers (name, value pairs) and
// returns the status and the decoded JSON body.
func send(t *testing.T, s *testenv.Server, method, path string, body any, headers ...string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 && raw[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("%s %s: bad JSON %s", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

func TestAuthEndToEndKeepsSecretsOutOfTheLog(t *testing.T) {
	const (
		opsToken = "ops-token-e2e-0123456789abcdef"
		keyA     = "e2e-key-client-a-0123456789"
		keyB     = "e2e-key-client-b-0123456789"
		wrong    = "e2e-wrong-secret-0123456789"
	)
	secrets := []string{opsToken, keyA, keyB, wrong}
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			res, other := testenv.Resource(t), testenv.Resource(t)
			logs := &lockedBuffer{}
			s := testenv.StartLogged(t, mode, logs, "--log-level", "debug",
				"--admin-tokens", "ops:"+opsToken,
				"--api-keys", keyA+"=client-a:"+res+";"+keyB+"=client-b:*")
			admin := []string{"Authorization", "Bearer " + opsToken}

			policy := map[string]any{"quotaType": "TOKENS", "totalLimit": 1000}
			if code, out := send(t, s, http.MethodPut, "/admin/policies/"+res, policy); code != http.StatusUnauthorized {
				t.Fatalf("PUT without a token: %d %v", code, out)
			}
			if code, out := send(t, s, http.MethodPut, "/admin/policies/"+res, policy, "Authorization", "Bearer "+wrong); code != http.StatusUnauthorized {
				t.Fatalf("PUT with a wrong token: %d %v", code, out)
			}
			for _, r := range []string{res, other} {
				if code, out := send(t, s, http.MethodPut, "/admin/policies/"+r, policy, admin...); code != http.StatusCreated {
					t.Fatalf("PUT %s: %d %v", r, code, out)
				}
			}

			code, a := send(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 100}, "X-API-Key", keyA)
			if code != http.StatusOK {
				t.Fatalf("apply: %d %v", code, a)
			}
			id := a["sessionId"]
			for _, c := range []struct {
				name, path string
				body       map[string]any
				key        string
				want       int
			}{
				{"apply without a key", "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 1}, "", http.StatusUnauthorized},
				{"apply with an unknown key", "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 1}, wrong, http.StatusUnauthorized},
				{"apply to a resource the key may not use", "/quota/apply", map[string]any{"resourceName": other, "applyAmount": 1}, keyA, http.StatusForbidden},
				{"apply as another client", "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 1, "clientId": "client-b"}, keyA, http.StatusForbidden},
				{"heartbeat of another client's session", "/quota/heartbeat", map[string]any{"resourceName": res, "sessionId": id}, keyB, http.StatusNotFound},
				{"finish of another client's session", "/quota/finish", map[string]any{"resourceName": res, "sessionId": id, "actualUsedAmount": 0}, keyB, http.StatusNotFound},
			} {
				var h []string
				if c.key != "" {
					h = []string{"X-API-Key", c.key}
				}
				if code, out := send(t, s, http.MethodPost, c.path, c.body, h...); code != c.want {
					t.Fatalf("%s: %d %v, want %d", c.name, code, out, c.want)
				}
			}
			code, st := send(t, s, http.MethodGet, "/quota/status?resourceName="+res, nil, "X-API-Key", keyA)
			if code != http.StatusOK || num(t, st, "reservedAmount") != 100 || num(t, st, "activeSessions") != 1 {
				t.Fatalf("status after the refused calls: %d %v", code, st)
			}
			code, f := send(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": res, "sessionId": id, "actualUsedAmount": 30}, "X-API-Key", keyA)
			if code != http.StatusOK || num(t, f, "chargedAmount") != 30 {
				t.Fatalf("finish by its own client: %d %v", code, f)
			}
			var row struct{ Client string }
			if err := s.Ledger.QueryRow("SELECT client_id FROM quota_usage WHERE session_id = ?", id).Scan(&row.Client); err != nil || row.Client != "client-a" {
				t.Fatalf("ledger client_id %q, %v; want client-a", row.Client, err)
			}

			code, au := send(t, s, http.MethodGet, "/admin/audit?resource="+res, nil, admin...)
			entries, _ := au["entries"].([]any)
			if code != http.StatusOK || len(entries) != 1 {
				t.Fatalf("audit: %d %v", code, au)
			}
			if e := entries[0].(map[string]any); e["actor"] != "ops" || e["before"] != nil || e["action"] != "policy.put" {
				t.Fatalf("audit entry %v", e)
			}

			text := logs.String()
			for _, want := range []string{"admin auth is on", "client auth is on", `"ops"`, "client-a", "request refused"} {
				if !strings.Contains(text, want) {
					t.Errorf("the log lacks %q:\n%s", want, text)
				}
			}
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Fatalf("the log carries a secret:\n%s", text)
				}
			}
		})
	}
}

func TestStartLogSaysWhichAuthIsOff(t *testing.T) {
	logs := &lockedBuffer{}
	testenv.StartLogged(t, testenv.Dev, logs, "--log-level", "info")
	text := logs.String()
	for _, want := range []string{"admin auth is off", "client auth is off"} {
		if !strings.Contains(text, want) {
			t.Errorf("dev start log lacks %q:\n%s", want, text)
		}
	}
}

func TestProductionWithoutAdminTokensRefusesAdmin(t *testing.T) {
	logs := &lockedBuffer{}
	s := testenv.StartLogged(t, testenv.Real, logs, "--admin-tokens", "", "--log-level", "info")
	code, out := send(t, s, http.MethodPut, "/admin/policies/"+testenv.Resource(t), map[string]any{"quotaType": "COUNT", "totalLimit": 1})
	if code != http.StatusForbidden || out["code"] != "PERMISSION_DENIED" ||
		out["message"] != "admin endpoints are disabled: set QC_ADMIN_TOKENS" {
		t.Fatalf("PUT: %d %v", code, out)
	}
	if code, out := send(t, s, http.MethodGet, "/admin/audit", nil); code != http.StatusForbidden {
		t.Fatalf("GET /admin/audit: %d %v", code, out)
	}
	if !strings.Contains(logs.String(), "admin endpoints are disabled: set QC_ADMIN_TOKENS") {
		t.Errorf("the start log does not say admin is disabled:\n%s", logs.String())
	}
}
