package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Logf receives progress lines (t.Logf, log.Printf, …). nil logs nothing.
type Logf func(format string, args ...any)

func (l Logf) printf(format string, args ...any) {
	if l != nil {
		l(format, args...)
	}
}

// ErrMissingBinary wraps the error of a server binary that is not installed.
// Tests skip on it (or fail when QC_TEST_REQUIRE_BACKENDS=1).
var ErrMissingBinary = errors.New("server binary not installed")

// lookBinary finds the first of names on PATH (also /usr/sbin, where Debian
// puts mariadbd, which is not on every user's PATH).
func lookBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin"} {
			p := dir + "/" + n
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s: %w", strings.Join(names, " or "), ErrMissingBinary)
}

// Available reports whether the binaries of the private servers are
// installed; the error says which one is missing.
func Available() error {
	if _, err := lookBinary("redis-server"); err != nil {
		return err
	}
	if _, err := lookBinary("mariadbd", "mysqld"); err != nil {
		return err
	}
	if _, err := lookBinary("mariadb-install-db", "mysql_install_db"); err != nil {
		return err
	}
	return nil
}

// freePort asks the kernel for a free loopback TCP port. The port is free
// when this returns; a server started right after gets it in practice.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitUntil calls check every 50ms until it returns nil, the deadline
// passes, stop returns an error (the server died), or ctx ends.
func waitUntil(ctx context.Context, within time.Duration, what string, stop func() error, check func(ctx context.Context) error) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		if stop != nil {
			if err := stop(); err != nil {
				if last == nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				return fmt.Errorf("%s: %w (last check: %w)", what, err, last)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready within %s: %w", what, within, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// process is one started server process.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's error, set before done is closed
}

// startProcess starts bin with args, appending its output to logPath.
func startProcess(bin string, args []string, logPath string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{name: bin, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr is non-nil once the process has exited: for waitUntil's stop.
func (p *process) exitErr() error {
	if !p.exited() {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%s exited", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.err)
}

// wait waits up to within for the process to exit.
func (p *process) wait(within time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s (pid %d) still running after %s", p.name, p.cmd.Process.Pid, within)
	}
}

// stop sends sig and waits up to within; then it kills the process.
func (p *process) stop(sig syscall.Signal, within time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	if err := p.wait(within); err == nil || sig == syscall.SIGKILL {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if err := p.wait(10 * time.Second); err != nil {
		return err
	}
	return fmt.Errorf("%s did not stop on %v within %s and was killed", p.name, sig, within)
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, st.Size()-n)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return strings.TrimSpace(string(buf))
}

// server holds what Redis and MariaDB share: one process at a time.
type server struct {
	mu   sync.Mutex
	proc *process
}

func (s *server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}
