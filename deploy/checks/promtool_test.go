package checks

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// promtool is Prometheus' own checker (Debian's prometheus package; .ci/run
// installs it). Without it these tests skip, unless QC_TEST_REQUIRE_BACKENDS=1
// (CI), where a missing promtool fails them.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("QC_TEST_REQUIRE_BACKENDS") == "1" {
			t.Fatal("promtool is not installed (apt-get install prometheus; .ci/run does it)")
		}
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(repoRoot, "deploy", "prometheus")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
}

func TestPromtoolCheckRules(t *testing.T)  { promtool(t, "check", "rules", "alerts.yml") }
func TestPromtoolTestRules(t *testing.T)   { promtool(t, "test", "rules", "alerts_test.yml") }
func TestPromtoolCheckConfig(t *testing.T) { promtool(t, "check", "config", "prometheus.yml") }
