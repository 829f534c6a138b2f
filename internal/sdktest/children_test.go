package sdktest

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// childProc is this test binary run again as a helper process: only test
// name runs, with env (NAME=value) set. Lines carries its stdout, line by
// line, and is closed when it exits; Stdin is its standard input.
type childProc struct {
	*exec.Cmd
	Lines <-chan string
	Stdin io.WriteCloser
}

func startChild(t *testing.T, name, env string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return &childProc{Cmd: cmd, Lines: lines, Stdin: in}
}

// waitLine waits up to 30 s for a line starting with prefix and returns it.
func (c *childProc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	var seen []string
	for {
		select {
		case l, ok := <-c.Lines:
			if !ok {
				t.Fatalf("the child exited without saying %q:\n%s", prefix, strings.Join(seen, "\n"))
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("the child did not say %q in 30 s:\n%s", prefix, strings.Join(seen, "\n"))
		}
	}
}

// kill SIGKILLs the child (no Close, nothing sent) and reaps it.
func (c *childProc) kill() {
	_ = c.Process.Kill()
	_ = c.Wait()
	go func() {
		for range c.Lines { // drain
		}
	}()
}

// poolWork is one worker of the bound tests: ops takes (take true) or
// reservations committed at 0 … 2n (refunds and overage), of 1 … 5 units.
// attempted is added to before the units are handed out, so that a sum of
// it read after a status is never below what was handed out by then. It
// returns the units handed out.
func poolWork(p *client.LocalPool, rng *rand.Rand, ops int, take bool, attempted func(int64), pace bool) (int64, error) {
	var handed int64
	for i := range ops {
		if pace && i%10 == 0 { // lets the watcher sample the work (dev mode is fast)
			time.Sleep(200 * time.Microsecond)
		}
		n := 1 + rng.Int64N(5)
		if take {
			attempted(n)
			if err := p.Take(context.Background(), n); err != nil {
				return handed, err
			}
			handed += n
			continue
		}
		rsv, err := p.Reserve(context.Background(), n)
		if err != nil {
			return handed, err
		}
		actual := rng.Int64N(2*n + 1)
		attempted(actual)
		if err := rsv.Commit(actual); err != nil {
			return handed, err
		}
		handed += actual
	}
	return handed, nil
}

// boundWatch samples the center's used + reserved beyond what the pools
// handed out (attempted, read after each status) until stopped.
type boundWatch struct {
	stop           chan struct{}
	wg             sync.WaitGroup
	worst, samples atomic.Int64 // samples: those with units held unhanded
	all            atomic.Int64
}

func watchBound(t *testing.T, s *testenv.Server, r string, attempted func() int64) *boundWatch {
	w := &boundWatch{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			st := status(t, s, r)
			w.all.Add(1)
			over := st.UsedAmount + st.ReservedAmount - attempted()
			if over > w.worst.Load() {
				w.worst.Store(over)
			}
			if over > 0 {
				w.samples.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return w
}

// check stops the watch and fails when the bound was passed. (How many
// samples saw batches held depends on the machine's load, so it is logged,
// not asserted.)
func (w *boundWatch) check(t *testing.T, bound int64) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if got := w.worst.Load(); got > bound {
		t.Fatalf("the center held %d units beyond what was handed out, bound %d", got, bound)
	}
	t.Logf("bound %d: at most %d held beyond what was handed out; %d samples, %d with batches held", bound, w.worst.Load(), w.all.Load(), w.samples.Load())
}
