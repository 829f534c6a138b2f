package checks

import (
	"bytes"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// The PrometheusRule is alerts.yml in the operator's form, byte for byte
// what `make k8s-rules` writes.
func TestPrometheusRuleInSyncWithAlerts(t *testing.T) {
	want, err := PrometheusRule(readFile(t, AlertsFile))
	if err != nil {
		t.Fatal(err)
	}
	got := readFile(t, PrometheusRuleFile)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what %s generates: run make k8s-rules", PrometheusRuleFile, AlertsFile)
	}
}

// The generated file decodes strictly into the operator's type and holds
// every rule of alerts.yml, expressions and all.
func TestPrometheusRuleHoldsEveryRule(t *testing.T) {
	var pr monitoringv1.PrometheusRule
	if err := sigsyaml.UnmarshalStrict(readFile(t, PrometheusRuleFile), &pr); err != nil {
		t.Fatal(err)
	}
	var src struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, AlertsFile), &src); err != nil {
		t.Fatal(err)
	}
	if len(pr.Spec.Groups) != len(src.Groups) {
		t.Fatalf("%d groups, alerts.yml has %d", len(pr.Spec.Groups), len(src.Groups))
	}
	n := 0
	for i, g := range src.Groups {
		pg := pr.Spec.Groups[i]
		if pg.Name != g.Name || len(pg.Rules) != len(g.Rules) {
			t.Fatalf("group %d: %q with %d rules, alerts.yml has %q with %d", i, pg.Name, len(pg.Rules), g.Name, len(g.Rules))
		}
		for j, r := range g.Rules {
			pr := pg.Rules[j]
			if pr.Alert != r.Alert || pr.Record != r.Record || strings.TrimSpace(pr.Expr.String()) != strings.TrimSpace(r.Expr) {
				t.Errorf("rule %s%s differs from alerts.yml", r.Alert, r.Record)
			}
			n++
		}
	}
	if n < 20 {
		t.Errorf("only %d rules", n)
	}
}

// A change to alerts.yml shows in the generated file.
func TestPrometheusRuleFollowsAlerts(t *testing.T) {
	alerts := bytes.Replace(readFile(t, AlertsFile), []byte("severity: critical"), []byte("severity: page"), 1)
	out, err := PrometheusRule(alerts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("severity: page")) {
		t.Error("the edit is not in the generated rule")
	}
	if _, err := PrometheusRule([]byte("groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: up ==\n")); err == nil {
		t.Error("an invalid expression was accepted")
	}
}
