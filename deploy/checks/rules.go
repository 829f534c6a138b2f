package checks

import (
	"bytes"
	"fmt"
	"log/slog"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/prometheus/prometheus/model/rulefmt"
	"gopkg.in/yaml.v3"
)

// AlertsFile and PrometheusRuleFile are the one source of the rules and the
// PrometheusRule generated from it, relative to the repository root.
const (
	AlertsFile         = "deploy/prometheus/alerts.yml"
	PrometheusRuleFile = "deploy/k8s/monitoring/prometheusrule.yaml"
)

const ruleHeader = `# GENERATED from deploy/prometheus/alerts.yml by ` + "`make k8s-rules`" + `: do not edit.
# The Prometheus Operator's form of the same rules (see alerts.yml for the
# notes on each); deploy/checks fails when the two differ.
`

// PrometheusRule returns the PrometheusRule manifest holding the rule
// groups of alerts (the contents of alerts.yml), comments and block scalars
// kept. Errors: alerts that Prometheus' own rule parser refuses, or that
// have no groups.
func PrometheusRule(alerts []byte) ([]byte, error) {
	if _, errs := rulefmt.Parse(alerts, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler)); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %v", AlertsFile, errs)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(alerts, &doc); err != nil {
		return nil, err
	}
	root := doc.Content[0]
	var groups *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "groups" {
			groups = root.Content[i+1]
		}
	}
	if groups == nil {
		return nil, fmt.Errorf("%s has no groups", AlertsFile)
	}
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }
	mapping := func(kv ...*yaml.Node) *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Content: kv} }
	out := mapping(
		str("apiVersion"), str("monitoring.coreos.com/v1"),
		str("kind"), str("PrometheusRule"),
		str("metadata"), mapping(
			str("name"), str("quota-center"),
			str("labels"), mapping(str("app.kubernetes.io/name"), str("quota-center")),
		),
		str("spec"), mapping(str("groups"), groups),
	)
	var buf bytes.Buffer
	buf.WriteString(ruleHeader)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
