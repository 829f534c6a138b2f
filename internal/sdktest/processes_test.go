package sdktest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// poolProcEnv carries "url resource counters index" to the children of
// TestThreeProcessesWithLocalPoolsStayWithinTheBoundAndEndExact.
const poolProcEnv = "QC_SDKTEST_POOL_PROCESS"

const procMaxBatch = 100

// counters maps a small shared file: one int64 per process, the units it
// is about to hand out (added before a take or a commit, so that the sum
// read after a status is never below what was handed out by then).
func counters(t *testing.T, path string, n int) []int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(8 * n)); err != nil {
		t.Fatal(err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, 8*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), n)
}

// TestLocalPoolProcess is a child: a Manager with a LocalPool (max batch
// 100) and two goroutines, one taking and one reserving with refunds and
// overage; it closes the pool and the Manager and prints what it handed out.
func TestLocalPoolProcess(t *testing.T) {
	arg := os.Getenv(poolProcEnv)
	if arg == "" {
		t.Skip("helper process of TestThreeProcessesWithLocalPoolsStayWithinTheBoundAndEndExact")
	}
	f := strings.Fields(arg)
	idx, _ := strconv.Atoi(f[3])
	attempted := &counters(t, f[2], 3)[idx]
	m, err := client.NewManager(f[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.LocalPool(f[1], client.WithBatch(50, 10, procMaxBatch), client.WithTargetPeriod(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil { // "go": the parent watches
		t.Fatal(err)
	}
	var handed atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := poolWork(p, rand.New(rand.NewPCG(uint64(idx), uint64(w))), 3000, w == 0,
				func(n int64) { atomic.AddInt64(attempted, n) }, true)
			handed.Add(n)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HANDED %d\n", handed.Load())
}

// TestThreeProcessesWithLocalPoolsStayWithinTheBoundAndEndExact: three
// processes, each with a Manager and a LocalPool of max batch 100, take and
// reserve on one center. While they work the center never holds
// (used + reserved) more than 3 × 100 beyond what they handed out; once
// they have closed their pools, usedAmount is exactly the sum they handed
// out and nothing is reserved.
func TestThreeProcessesWithLocalPoolsStayWithinTheBoundAndEndExact(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		const procs = 3
		r := policy(t, s, client.PolicySpec{QuotaType: client.QuotaTypeTokens, TotalLimit: 10_000_000})
		path := filepath.Join(t.TempDir(), "counters")
		attempted := counters(t, path, procs)
		var kids []*childProc
		for i := range procs {
			kids = append(kids, startChild(t, "TestLocalPoolProcess", fmt.Sprintf("%s=%s %s %s %d", poolProcEnv, s.URL, r, path, i)))
		}
		watch := watchBound(t, s, r, func() int64 {
			var sum int64
			for i := range attempted {
				sum += atomic.LoadInt64(&attempted[i])
			}
			return sum
		})
		for _, k := range kids {
			if _, err := io.WriteString(k.Stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			_ = k.Stdin.Close()
		}
		var handed int64
		for i, k := range kids {
			var n int64
			if _, err := fmt.Sscanf(k.waitLine(t, "HANDED "), "HANDED %d", &n); err != nil {
				t.Fatal(err)
			}
			if err := k.Wait(); err != nil {
				t.Fatalf("process %d: %v", i, err)
			}
			handed += n
		}
		watch.check(t, procs*procMaxBatch)
		st := status(t, s, r)
		if st.UsedAmount != handed || st.ReservedAmount != 0 || st.ActiveSessions != 0 {
			t.Fatalf("after every process closed its pool: %+v, want usedAmount %d exactly", st, handed)
		}
		t.Logf("3 processes handed %d units; the center held at most %d beyond that (bound %d, %d samples with batches held)",
			handed, watch.worst.Load(), procs*procMaxBatch, watch.samples.Load())
	})
}
