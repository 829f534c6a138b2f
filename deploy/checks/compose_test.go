package checks

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// docker-compose.yml loads under compose v2's own loader (schema
// validation, interpolation from .env.example, consistency checks), with
// the monitoring profile, and wires what the runbook says it does.
func TestComposeFileLoads(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy")
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "docker-compose.yml")},
		cli.WithWorkingDirectory(dir),
		cli.WithEnvFiles(filepath.Join(dir, ".env.example")),
		cli.WithDotEnv,
		cli.WithProfiles([]string{"monitoring"}),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	qc, mig := svc("quota-center"), svc("migrate")
	if qc.Image != mig.Image {
		t.Errorf("server image %q, migration image %q: they must be one build", qc.Image, mig.Image)
	}
	if d := qc.DependsOn["migrate"]; d.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("quota-center does not wait for the migration: %+v", d)
	}
	if d := qc.DependsOn["redis"]; d.Condition != types.ServiceConditionHealthy {
		t.Errorf("quota-center does not wait for a healthy Redis: %+v", d)
	}
	if v := qc.Environment["QC_INSECURE_OPEN_QUOTA"]; v == nil || *v != "false" {
		t.Errorf("QC_INSECURE_OPEN_QUOTA = %v, want false by default", v)
	}
	// Every bind mount names a file or folder of the repository.
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s mounts %s: %v", s.Name, v.Source, err)
			}
		}
	}
	for _, name := range []string{"redis", "mariadb", "prometheus", "grafana"} {
		svc(name)
	}
}
