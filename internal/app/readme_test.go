package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// readmeExample is the first ```json block after the README heading.
func readmeExample(t *testing.T, heading string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no %q", heading)
	}
	_, rest, _ = strings.Cut(rest, "```json\n")
	block, _, _ := strings.Cut(rest, "```")
	var m map[string]any
	if err := json.Unmarshal([]byte(block), &m); err != nil {
		t.Fatalf("README %s example: %v\n%s", heading, err, block)
	}
	return m
}

func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// The README's examples of the apply, heartbeat, finish, status and
// reconcile answers have the fields a dev-mode server sends (status and
// reconcile lagged behind burnRate, exhaustsAt, limitSynced and
// failOpenRecorded).
func TestReadmeExamplesHaveTheFieldsTheServerSends(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	call := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, bytes.NewReader([]byte(body)))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if resp.StatusCode/100 != 2 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return m
	}
	res := testenv.Resource(t)
	call("PUT", "/admin/policies/"+res, `{"quotaType":"DURATION","totalLimit":18000,"resetCron":"0 0 * * *"}`)
	session := `{"resourceName":"` + res + `","sessionId":"s-42","clientId":"report-svc"`
	for _, step := range []struct{ heading, path, body string }{
		{"### Apply", "/quota/apply", session + `,"applyAmount":600}`},
		{"### Heartbeat", "/quota/heartbeat", session + `}`},
		{"### Finish", "/quota/finish", session + `,"actualUsedAmount":420}`},
	} {
		if got, doc := call("POST", step.path, step.body), readmeExample(t, step.heading); !slices.Equal(keys(got), keys(doc)) {
			t.Errorf("%s: the server sends %v, the README shows %v", step.path, keys(got), keys(doc))
		}
	}
	if got, doc := call("GET", "/quota/status?resourceName="+res, ""), readmeExample(t, "### Status"); !slices.Equal(keys(got), keys(doc)) {
		t.Errorf("status: the server sends %v, the README shows %v", keys(got), keys(doc))
	}
	got, doc := call("POST", "/admin/reconcile?resourceName="+res, ""), readmeExample(t, "### Reconciliation")
	if !slices.Equal(keys(got), keys(doc)) {
		t.Errorf("reconcile: the server sends %v, the README shows %v", keys(got), keys(doc))
	}
	report := func(m map[string]any) map[string]any { return m["reports"].([]any)[0].(map[string]any) }
	if !slices.Equal(keys(report(got)), keys(report(doc))) {
		t.Errorf("reconcile report: the server sends %v, the README shows %v", keys(report(got)), keys(report(doc)))
	}
}
