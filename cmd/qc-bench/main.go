// Command qc-bench is the load generator of the quota-center benchmark
// (scripts/bench.sh, `make bench`). It drives a server with vegeta's attack
// library (github.com/tsenart/vegeta/v12/lib) at a fixed number of
// connections and as fast as they go (rate 0), then prints one JSON line.
//
//	qc-bench --url http://127.0.0.1:18080 --scenario session --connections 50 --duration 10s
//	qc-bench report --results results.jsonl --meta meta.txt --out docs/performance.md
//
// Scenarios (each step's request waits for the previous step's answer; many
// sessions are interleaved):
//
//	apply              apply, a fresh client-chosen session id each time
//	session            apply → finish
//	heartbeat-session  apply → heartbeat → heartbeat → finish
//	heartbeat          heartbeats only, round robin over a pool of sessions
//	                   opened before the measurement
//
// Only loopback targets are accepted, the duration is bounded, and the run
// stops by itself.
//
// With --watch NAME=PID (repeatable) it also records each process's CPU time
// (utime+stime from /proc) over the measured window, and its RSS (VmRSS,
// VmHWM) at the end; its own CPU is recorded as "qc-bench". With
// --metrics-url it reads go_goroutines from a Prometheus endpoint in the
// middle of the window; with --sample-every it samples RSS and goroutines
// through the whole window (for a leak check over a long run).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// MaxDuration bounds one measured run (and the warm-up).
const MaxDuration = 10 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "report" {
		err = reportMain(os.Args[2:], os.Stdout)
	} else {
		err = runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "qc-bench:", err)
		os.Exit(1)
	}
}

// Result is the one JSON line a run prints. report reads them back.
type Result struct {
	Label       string             `json:"label"`
	Scenario    string             `json:"scenario"`
	Connections int                `json:"connections"`
	Rep         int                `json:"rep"`
	URL         string             `json:"url"`
	DurationS   float64            `json:"duration_s"` // first request sent → last answer read
	Requests    uint64             `json:"requests"`
	OK          uint64             `json:"ok"`        // 2xx answers
	ReqPerS     float64            `json:"req_per_s"` // 2xx answers per second
	Sessions    uint64             `json:"sessions"`  // sessions whose last step answered 2xx
	SessionsPS  float64            `json:"sessions_per_s"`
	Aborted     uint64             `json:"aborted_sessions"`  // dropped after a failed step
	OpenAtEnd   uint64             `json:"open_sessions_end"` // applied, not finished when the window closed
	Latency     Lat                `json:"latency_ms"`        // every request
	Steps       map[string]Lat     `json:"steps_ms"`          // per kind of request
	Status      map[string]uint64  `json:"status"`            // answers by HTTP status; "0" = no answer (error)
	Non2xx      uint64             `json:"non_2xx"`           // including transport errors
	Non2xxNo429 uint64             `json:"non_2xx_excl_429"`  // must be 0
	Errors      map[string]uint64  `json:"errors,omitempty"`
	CPU         map[string]float64 `json:"cpu_cores"` // CPU seconds / window seconds, per process
	MachineBusy float64            `json:"machine_busy_cores"`
	NCPU        int                `json:"ncpu"`
	Mem         map[string]Mem     `json:"mem_mib,omitempty"`
	Goroutines  int                `json:"goroutines_mid,omitempty"`
	Samples     []Sample           `json:"samples,omitempty"`
	Started     string             `json:"started"`
}

// Lat is a latency summary in milliseconds.
type Lat struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Mem is a process's resident memory in MiB.
type Mem struct {
	RSS float64 `json:"rss"`
	HWM float64 `json:"hwm"`
}

// Sample is one point of --sample-every.
type Sample struct {
	T          float64            `json:"t_s"`
	RSS        map[string]float64 `json:"rss_mib"`
	Goroutines int                `json:"goroutines,omitempty"`
}

func lat(m *vegeta.Metrics) Lat {
	m.Close()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Lat{Count: m.Requests, Mean: ms(m.Latencies.Mean), P50: ms(m.Latencies.P50),
		P90: ms(m.Latencies.P90), P99: ms(m.Latencies.P99), Max: ms(m.Latencies.Max)}
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args)
	if err != nil {
		return err
	}
	d, err := newDriver(o.url, o.resource, o.clientID, o.amount, o.actual, o.header, o.scenario)
	if err != nil {
		return err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        o.connections,
		MaxIdleConnsPerHost: o.connections,
		MaxConnsPerHost:     o.connections,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.timeout}
	// No vegeta.KeepAlive option: tr keeps connections alive already, and
	// the option writes tr.DisableKeepAlives while openPool's dials (started
	// on tr before the first attacker is made) may still read it: a data
	// race the race detector caught in CI.
	newAttacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(vegeta.Client(client),
			vegeta.Workers(uint64(o.connections)), vegeta.MaxWorkers(uint64(o.connections)),
			vegeta.Redirects(vegeta.NoFollow))
	}
	// Rate 0: no pacing, every worker sends its next request as soon as its
	// previous one is answered.
	pacer := vegeta.ConstantPacer{Freq: 0, Per: time.Second}

	if o.scenario == ScenarioHeartbeat {
		if d.pool, err = openPool(ctx, client, d, o.pool, o.connections); err != nil {
			return err
		}
	}
	if o.warmup > 0 {
		if err := attack(ctx, newAttacker(), d, pacer, o.warmup, "warmup"); err != nil {
			return err
		}
		d.reset()
	}

	res := Result{
		Label: o.label, Scenario: o.scenario, Connections: o.connections, Rep: o.rep, URL: o.url,
		NCPU: runtime.NumCPU(), Started: time.Now().UTC().Format(time.RFC3339),
	}
	self := watched{"qc-bench", os.Getpid()}
	procs := append(watchFlag{self}, o.watch...)
	cpu0 := readCPU(procs)
	busy0, _, _ := machineCPU()
	t0 := time.Now()

	var wg sync.WaitGroup
	sctx, stopSampling := context.WithCancel(ctx)
	if o.metricsURL != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(o.duration / 2):
				res.Goroutines, _ = goroutines(sctx, o.metricsURL)
			case <-sctx.Done():
			}
		}()
	}
	if o.sampleEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(o.sampleEvery)
			defer tick.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case now := <-tick.C:
					s := Sample{T: now.Sub(t0).Seconds(), RSS: map[string]float64{}}
					for _, p := range o.watch {
						if rss, _, err := procMem(p.PID); err == nil {
							s.RSS[p.Name] = rss
						}
					}
					if o.metricsURL != "" {
						n, err := goroutines(sctx, o.metricsURL)
						if err != nil {
							continue // the window ended, or the server did not answer in time
						}
						s.Goroutines = n
					}
					res.Samples = append(res.Samples, s)
				}
			}
		}()
	}

	err = attack(ctx, newAttacker(), d, pacer, o.duration, "measure")
	window := time.Since(t0)
	cpu1 := readCPU(procs)
	busy1, _, _ := machineCPU()
	stopSampling()
	wg.Wait()
	if err != nil {
		return err
	}

	s := &d.stats
	res.Latency = lat(&s.overall)
	// The window is the first request sent to the last answer read, as
	// vegeta measures it (Duration + Wait); fall back to the wall clock.
	res.DurationS = (s.overall.Duration + s.overall.Wait).Seconds()
	if res.DurationS <= 0 {
		res.DurationS = window.Seconds()
	}
	res.Requests = s.overall.Requests
	res.OK = s.ok
	res.ReqPerS = float64(s.ok) / res.DurationS
	if o.scenario == ScenarioApply {
		res.Sessions = s.ok
	} else if len(d.pool) == 0 {
		res.Sessions = s.completed
		res.Aborted = s.aborted
		res.OpenAtEnd = s.started - s.completed - s.aborted
	}
	res.SessionsPS = float64(res.Sessions) / res.DurationS
	res.Steps = map[string]Lat{}
	for k, m := range s.perStep {
		if m.Requests > 0 {
			res.Steps[stepKind(k).String()] = lat(m)
		}
	}
	res.Status = map[string]uint64{}
	for code, n := range s.codes {
		res.Status[strconv.Itoa(code)] = n
		if code < 200 || code >= 300 {
			res.Non2xx += n
			if code != http.StatusTooManyRequests {
				res.Non2xxNo429 += n
			}
		}
	}
	if len(s.errors) > 0 {
		res.Errors = s.errors
	}
	if s.badResult > 0 {
		return fmt.Errorf("%d results carried no session fragment (a qc-bench bug)", s.badResult)
	}
	res.CPU = map[string]float64{}
	secs := window.Seconds()
	for _, p := range procs {
		a, ok0 := cpu0[p.Name]
		b, ok1 := cpu1[p.Name]
		if ok0 && ok1 {
			res.CPU[p.Name] = round3((b - a) / secs)
		}
	}
	res.MachineBusy = round3((busy1 - busy0) / secs)
	res.Mem = map[string]Mem{}
	for _, p := range o.watch {
		if rss, hwm, err := procMem(p.PID); err == nil {
			res.Mem[p.Name] = Mem{RSS: round3(rss), HWM: round3(hwm)}
		}
	}

	fmt.Fprintf(stderr, "qc-bench %-12s %-17s c=%-3d rep=%d: %8.0f req/s %8.0f sessions/s p50 %.2f p90 %.2f p99 %.2f ms, non-2xx %d (excl. 429: %d), busy %.2f/%d cores\n",
		o.label, o.scenario, o.connections, o.rep, res.ReqPerS, res.SessionsPS,
		res.Latency.P50, res.Latency.P90, res.Latency.P99, res.Non2xx, res.Non2xxNo429, res.MachineBusy, res.NCPU)
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// attack runs one vegeta attack for du and feeds every Result to d. It
// returns when the last in-flight request has been answered.
func attack(ctx context.Context, a *vegeta.Attacker, d *driver, p vegeta.Pacer, du time.Duration, name string) error {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			a.Stop()
		case <-done:
		}
	}()
	defer close(done)
	for r := range a.Attack(d.targeter(), p, du, name) {
		d.observe(r)
	}
	return ctx.Err()
}

// openPool opens n sessions for the heartbeat scenario, conns at a time.
func openPool(ctx context.Context, c *http.Client, d *driver, n, conns int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = d.newID()
	}
	errc := make(chan error, conns)
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(conns, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+stepApply.path(), strings.NewReader(string(d.body(stepApply, id))))
				if err != nil {
					errc <- err
					return
				}
				req.Header = d.header.Clone()
				resp, err := c.Do(req)
				if err != nil {
					errc <- err
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errc <- fmt.Errorf("opening the heartbeat pool: apply answered %d: %s", resp.StatusCode, truncate(body, 300))
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, id := range ids {
		select {
		case next <- id:
		case err = <-errc:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return ids, err
}

func readCPU(ps []watched) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		if v, err := procCPU(p.PID); err == nil {
			out[p.Name] = v
		}
	}
	return out
}

// goroutines reads go_goroutines from a Prometheus text endpoint.
func goroutines(ctx context.Context, u string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no go_goroutines in " + u)
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
