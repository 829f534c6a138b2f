// Command k8s-rules writes deploy/k8s/monitoring/prometheusrule.yaml from
// deploy/prometheus/alerts.yml (`make k8s-rules`, run from the repository
// root or with the root as its only argument).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/quotacenter/quota-center/deploy/checks"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	if err := run(root); err != nil {
		fmt.Fprintln(os.Stderr, "k8s-rules:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	alerts, err := os.ReadFile(filepath.Join(root, checks.AlertsFile))
	if err != nil {
		return err
	}
	out, err := checks.PrometheusRule(alerts)
	if err != nil {
		return err
	}
	dst := filepath.Join(root, checks.PrometheusRuleFile)
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", dst)
	return nil
}
