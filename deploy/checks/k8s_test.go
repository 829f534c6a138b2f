package checks

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"
)

// objects is a kustomization built by kustomize's own library, each object
// decoded strictly (unknown or duplicate fields are errors) into its
// k8s.io/api or Prometheus Operator type.
type objects struct {
	sa      corev1.ServiceAccount
	deploy  appsv1.Deployment
	svc     corev1.Service
	pdb     policyv1.PodDisruptionBudget
	netpol  networkingv1.NetworkPolicy
	sm      monitoringv1.ServiceMonitor
	rule    monitoringv1.PrometheusRule
	byKinds []string
}

func build(t *testing.T, dir string) objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, dir))
	if err != nil {
		t.Fatal(err)
	}
	var o objects
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		dst := map[string]any{
			"ServiceAccount": &o.sa, "Deployment": &o.deploy, "Service": &o.svc,
			"PodDisruptionBudget": &o.pdb, "NetworkPolicy": &o.netpol,
			"ServiceMonitor": &o.sm, "PrometheusRule": &o.rule,
		}[r.GetKind()]
		if dst == nil {
			t.Fatalf("%s: unexpected kind %s", dir, r.GetKind())
		}
		if err := sigsyaml.UnmarshalStrict(y, dst); err != nil {
			t.Fatalf("%s %s: %v", r.GetKind(), r.GetName(), err)
		}
		o.byKinds = append(o.byKinds, r.GetKind())
	}
	return o
}

func (o objects) has(kind string) bool {
	for _, k := range o.byKinds {
		if k == kind {
			return true
		}
	}
	return false
}

func TestKustomizationBuildsAndDecodesStrictly(t *testing.T) {
	o := build(t, "deploy/k8s")
	for _, k := range []string{"ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"} {
		if !o.has(k) {
			t.Errorf("deploy/k8s has no %s (has %v)", k, o.byKinds)
		}
	}
	if t.Failed() {
		return
	}
	pod := o.deploy.Spec.Template
	ps := pod.Spec

	// One pinned image for the server and its migration.
	all := append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...)
	image := ps.Containers[0].Image
	if err := pinned(image); err != nil {
		t.Error(err)
	}
	for _, c := range all {
		if c.Image != image {
			t.Errorf("container %s runs %q, the server %q", c.Name, c.Image, image)
		}
	}
	if len(ps.InitContainers) != 1 || strings.Join(ps.InitContainers[0].Args, " ") != "migrate" {
		t.Errorf("the migration is not the init container: %+v", ps.InitContainers)
	}

	// Its own ServiceAccount, no token.
	if ps.ServiceAccountName != o.sa.Name {
		t.Errorf("serviceAccountName %q, the kustomization's is %q", ps.ServiceAccountName, o.sa.Name)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken ||
		o.sa.AutomountServiceAccountToken == nil || *o.sa.AutomountServiceAccountToken {
		t.Error("a service account token is mounted")
	}

	// Security context: non-root, read-only, no privilege, no capability.
	if sc := ps.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil {
		t.Error("pod securityContext is not runAsNonRoot with a seccomp profile")
	}
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: securityContext %+v", c.Name, sc)
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("container %s has no memory limit", c.Name)
		}
	}

	// The runtime's limits from the server's resources (downward API):
	// serve sets GOMEMLIMIT to 90 % of QC_MEMORY_LIMIT_BYTES and GOMAXPROCS
	// from QC_CPU_REQUEST_MILLICORES (cmd/quota-center/limits.go). A
	// GOMEMLIMIT of the whole limit leaves no headroom (issue 22 §9).
	srv := ps.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range srv.Env {
		env[e.Name] = e
	}
	for name, want := range map[string]string{"QC_MEMORY_LIMIT_BYTES": "limits.memory", "QC_CPU_REQUEST_MILLICORES": "requests.cpu"} {
		e, ok := env[name]
		if !ok || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != want ||
			(e.ValueFrom.ResourceFieldRef.ContainerName != "" && e.ValueFrom.ResourceFieldRef.ContainerName != srv.Name) {
			t.Errorf("%s is not the server's %s: %+v", name, want, e)
		}
	}
	if e := env["QC_CPU_REQUEST_MILLICORES"]; e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
		e.ValueFrom.ResourceFieldRef.Divisor.String() != "1m" {
		t.Errorf("QC_CPU_REQUEST_MILLICORES has divisor %s, want 1m (millicores)", e.ValueFrom.ResourceFieldRef.Divisor.String())
	}
	if e, ok := env["GOMEMLIMIT"]; ok {
		limit := srv.Resources.Limits[corev1.ResourceMemory]
		if err := belowLimit(e, limit.Value()); err != nil {
			t.Error(err)
		}
	}
	if _, ok := env["GOMAXPROCS"]; !ok && srv.Resources.Requests.Cpu().IsZero() {
		t.Error("no CPU request and no GOMAXPROCS: the runtime would run one P per CPU of the node")
	}

	// Probes: liveness /healthz, readiness /readyz.
	if p := srv.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v", p)
	}
	if p := srv.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v", p)
	}

	// The Service, the PDB and the NetworkPolicy select these pods, on a
	// port the container has.
	podLabels := labels.Set(pod.Labels)
	for name, sel := range map[string]*metav1.LabelSelector{
		"PodDisruptionBudget": o.pdb.Spec.Selector,
		"NetworkPolicy":       &o.netpol.Spec.PodSelector,
		"Service":             {MatchLabels: o.svc.Spec.Selector},
	} {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s selector %v does not select the pods %v (%v)", name, sel, pod.Labels, err)
		}
	}
	ports := map[string]bool{}
	for _, p := range srv.Ports {
		ports[p.Name] = true
	}
	if tp := o.svc.Spec.Ports[0].TargetPort.String(); !ports[tp] {
		t.Errorf("Service targetPort %q is not a container port %v", tp, ports)
	}
	if in := o.netpol.Spec.Ingress; len(in) == 0 || in[0].Ports[0].Port == nil || !ports[in[0].Ports[0].Port.String()] {
		t.Errorf("NetworkPolicy ingress does not allow the HTTP port: %+v", in)
	}
	egress := map[string]bool{}
	for _, e := range o.netpol.Spec.Egress {
		for _, p := range e.Ports {
			egress[p.Port.String()] = true
		}
	}
	// DNS, Redis, Redis Sentinel (QC_REDIS_MODE=sentinel asks the
	// Sentinels on 26379 for the master), MySQL.
	for _, p := range []string{"53", "6379", "26379", "3306"} {
		if !egress[p] {
			t.Errorf("NetworkPolicy egress does not allow port %s", p)
		}
	}

	// The ServiceMonitor scrapes this Service on its HTTP port; the job is
	// then the Service's name, which the rules select on.
	m := build(t, "deploy/k8s/monitoring")
	if !m.has("ServiceMonitor") || !m.has("PrometheusRule") {
		t.Fatalf("deploy/k8s/monitoring has %v", m.byKinds)
	}
	s, err := metav1.LabelSelectorAsSelector(&m.sm.Spec.Selector)
	if err != nil || !s.Matches(labels.Set(o.svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the Service %v", m.sm.Spec.Selector, o.svc.Labels)
	}
	if ep := m.sm.Spec.Endpoints; len(ep) != 1 || ep[0].Port != o.svc.Spec.Ports[0].Name || ep[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v", ep)
	}
	if o.svc.Name != "quota-center" || m.sm.Spec.JobLabel != "" {
		t.Errorf("the job label would not be quota-center (Service %q, jobLabel %q)", o.svc.Name, m.sm.Spec.JobLabel)
	}
}

// pinned: a tag or a digest, never "latest".
func pinned(image string) error {
	if _, digest, ok := strings.Cut(image, "@sha256:"); ok && len(digest) == 64 {
		return nil
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return fmt.Errorf("image %q has no tag", image)
	}
	if tag := image[i+1:]; tag == "" || tag == "latest" {
		return fmt.Errorf("image %q is not pinned", image)
	}
	return nil
}

func TestPinned(t *testing.T) {
	for img, ok := range map[string]bool{
		"quota-center:0.1.0": true, "reg:5000/quota-center:1.2": true,
		"quota-center@sha256:" + strings.Repeat("a", 64): true,
		"quota-center": false, "quota-center:latest": false, "reg:5000/quota-center": false,
	} {
		if err := pinned(img); (err == nil) != ok {
			t.Errorf("pinned(%q) = %v", img, err)
		}
	}
}

// belowLimit checks that a GOMEMLIMIT set in the manifest is a literal of
// at most 95 % of the memory limit (bytes), never the limit itself.
func belowLimit(e corev1.EnvVar, limit int64) error {
	if e.ValueFrom != nil {
		return fmt.Errorf("GOMEMLIMIT comes from %+v: the downward API can only give the whole limit; set QC_MEMORY_LIMIT_BYTES instead", e.ValueFrom)
	}
	v := strings.TrimSuffix(e.Value, "B")
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("GOMEMLIMIT %q: %w", e.Value, err)
	}
	if q.Value() > limit/100*95 {
		return fmt.Errorf("GOMEMLIMIT %s is above 95 %% of the memory limit %d bytes", e.Value, limit)
	}
	return nil
}

func TestBelowLimit(t *testing.T) {
	const limit = 256 << 20
	for _, tt := range []struct {
		give corev1.EnvVar
		ok   bool
	}{
		{corev1.EnvVar{Value: "230MiB"}, true},
		{corev1.EnvVar{Value: "256MiB"}, false},
		{corev1.EnvVar{Value: "250MiB"}, false},
		{corev1.EnvVar{ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}}, false},
		{corev1.EnvVar{Value: "lots"}, false},
	} {
		if err := belowLimit(tt.give, limit); (err == nil) != tt.ok {
			t.Errorf("belowLimit(%+v) = %v", tt.give, err)
		}
	}
}
