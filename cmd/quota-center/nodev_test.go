package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goTool runs the go command of this toolchain in this package's folder.
func goTool(t *testing.T, args ...string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check the nodev build: %v", err)
	}
	out, err := exec.Command(goBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The production build (-tags nodev, the Dockerfile's) links neither
// miniredis nor the SQLite driver: dev mode's backends stay out of it
// (issue 22 §9). The default build, which make run and the tests use,
// still has them.
func TestNodevBuildLeavesTheDevBackendsOut(t *testing.T) {
	dev := []string{"github.com/alicebob/miniredis/v2", "modernc.org/sqlite"}
	all := goTool(t, "list", "-deps", ".")
	prod := goTool(t, "list", "-tags", "nodev", "-deps", ".")
	for _, p := range dev {
		if !strings.Contains(all, p+"\n") {
			t.Errorf("the default build does not link %s: dev mode would not work", p)
		}
		if strings.Contains(prod, p+"\n") {
			t.Errorf("the nodev build links %s", p)
		}
	}
}

// A nodev binary started without backends says that dev mode is not in it
// and how to get it, and exits with an error; it does not serve.
func TestNodevBinaryRefusesDevMode(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "quota-center")
	goTool(t, "build", "-tags", "nodev", "-o", bin, ".")
	for _, env := range [][]string{nil, {"QC_HTTP_ADDR=:8080"}} {
		// A binary that served would run until stopped: the context ends it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--http-addr", "127.0.0.1:0")
		if env != nil {
			cmd = exec.CommandContext(ctx, bin, "serve")
		}
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "dev mode is not in this binary") || !strings.Contains(string(out), "QC_REDIS_ADDR") {
			t.Errorf("nodev serve with %v: %v\n%s\nwant an error saying dev mode is not built in", env, err, out)
		}
	}
}
