// Package checks holds the tests that hold the deploy files to the
// ecosystem's own rules, and the generator of the files derived from them:
//
//   - the Grafana dashboard under the rules of grafana/dashboard-linter in
//     strict mode (dashboard_test.go);
//   - deploy/k8s built with kustomize's own library and every object decoded
//     strictly into its k8s.io/api or Prometheus Operator type (k8s_test.go);
//   - deploy/k8s/monitoring/prometheusrule.yaml generated from
//     deploy/prometheus/alerts.yml, the one source of the alert rules
//     (rules.go; `make k8s-rules` writes it, rules_test.go fails when the
//     two differ);
//   - deploy/docker-compose.yml parsed by compose v2's loader (compose_test.go).
//
// It is its own Go module so that these libraries (Prometheus, Kubernetes,
// kustomize, compose) stay out of the service's go.mod. It must not import
// the service's packages: it reads the files, as the tools would.
package checks
