package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScenarioManyPolicies is `qc-bench many-policies`: issue 23 §1's
// benchmark. It creates --policies policies through the admin API, waits
// until they are idle (--idle-after: the server's --active-window plus a
// margin), then measures four phases:
//
//   - idle: every policy idle, no traffic; Redis commands/s (INFO
//     commandstats deltas, the benchmark's own INFO calls left out) and
//     MySQL statements/s (Questions, with --mysql-dsn) are the background
//     work; /metrics is scraped (time, bytes, samples);
//   - load: apply → finish sessions on --active-percent of the resources,
//     picked at random per session, on --connections workers;
//   - after: no traffic, the loaded resources still active (within the
//     window): background work, scrape, heap and RSS again;
//   - quiet: the next phase, still no traffic and the resources still
//     used (their leases keep them active), once every loop visited them
//     after their last change: the steady background work of used but
//     quiet resources (issue 23 §1: the loops skip unchanged resources).
const ScenarioManyPolicies = "many-policies"

type manyOptions struct {
	url, adminToken, redisAddr, mysqlDSN, prefix string
	pprofURL                                     string
	policies, createConns, connections           int
	activePercent                                float64
	idleAfter, phase                             time.Duration
}

// ManyResult is the JSON line of a many-policies run. Sizes are bytes,
// times seconds, rates per second.
type ManyResult struct {
	Scenario       string    `json:"scenario"`
	Policies       int       `json:"policies"`
	Active         int       `json:"active_resources"`
	CreateSeconds  float64   `json:"create_s"`
	Idle           ManyPhase `json:"idle"`
	Load           ManyPhase `json:"load"`
	After          ManyPhase `json:"after"`
	Quiet          ManyPhase `json:"quiet"`
	SessionsPerSec float64   `json:"sessions_per_s"`
	Errors         int64     `json:"errors"`
	FirstError     string    `json:"first_error,omitempty"`
}

// ManyPhase is one phase's figures.
type ManyPhase struct {
	Seconds         float64 `json:"s"`
	RedisCmdsPerSec float64 `json:"redis_cmds_per_s"`
	MySQLPerSec     float64 `json:"mysql_statements_per_s,omitempty"`
	ScrapeSeconds   float64 `json:"scrape_s"` // the slowest of the phase's scrapes
	ScrapeBytes     int     `json:"scrape_bytes"`
	Samples         int     `json:"samples"`
	HeapBytes       float64 `json:"heap_inuse_bytes"`
	// HeapLiveBytes is the live heap: with --pprof-url, HeapAlloc right
	// after a forced GC at the end of the phase (/debug/pprof/heap?gc=1);
	// without, go_memstats_next_gc_bytes ÷ 2 (the GC's next target is the
	// live heap at the last GC times 1 + GOGC/100; the benchmark's server
	// runs GOGC=100, no GOMEMLIMIT), an estimate.
	HeapLiveBytes float64 `json:"heap_live_bytes"`
	RSSBytes      float64 `json:"rss_bytes"`
}

func parseMany(args []string) (manyOptions, error) {
	o := manyOptions{}
	fs := flag.NewFlagSet("qc-bench many-policies", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:18080", "server base URL (loopback only)")
	fs.StringVar(&o.adminToken, "admin-token", "", "bearer token of /admin/* (to create the policies)")
	fs.StringVar(&o.redisAddr, "redis-addr", "127.0.0.1:6379", "the server's Redis, for INFO commandstats")
	fs.StringVar(&o.pprofURL, "pprof-url", "", "the server's --pprof-addr as a URL, for the live heap after a forced GC at the end of each phase (empty = not measured)")
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", "", "the server's MySQL, for SHOW GLOBAL STATUS Questions (empty = not measured)")
	fs.StringVar(&o.prefix, "prefix", "mp", "resource name prefix (names are PREFIX-NNNNNN)")
	fs.IntVar(&o.policies, "policies", 100000, "policies to create")
	fs.Float64Var(&o.activePercent, "active-percent", 1, "percent of the resources the load phase uses")
	fs.IntVar(&o.createConns, "create-connections", 16, "concurrent PUTs while creating")
	fs.IntVar(&o.connections, "connections", 50, "workers of the load phase")
	fs.DurationVar(&o.idleAfter, "idle-after", 70*time.Second, "wait after creating, until every policy is idle (the server's --active-window plus a margin)")
	fs.DurationVar(&o.phase, "phase", 20*time.Second, "length of each measured phase")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := loopbackOnly(o.url); err != nil {
		return o, err
	}
	if o.policies < 1 || o.activePercent <= 0 || o.activePercent > 100 || o.connections < 1 || o.createConns < 1 || o.phase <= 0 {
		return o, fmt.Errorf("--policies, --connections, --create-connections and --phase must be positive, --active-percent in (0, 100]")
	}
	return o, nil
}

func (o manyOptions) name(i int) string { return fmt.Sprintf("%s-%06d", o.prefix, i) }

func manyMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseMany(args)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: max(o.connections, o.createConns)}}
	rdb := redis.NewClient(&redis.Options{Addr: o.redisAddr})
	defer rdb.Close()
	var my statusReader
	if o.mysqlDSN != "" {
		if my, err = openStatusReader(o.mysqlDSN); err != nil {
			return err
		}
		defer my.Close()
	}
	res := ManyResult{Scenario: ScenarioManyPolicies, Policies: o.policies,
		Active: max(1, int(float64(o.policies)*o.activePercent/100))}

	fmt.Fprintf(stderr, "many-policies: creating %d policies\n", o.policies)
	start := time.Now()
	if err := o.create(ctx, client); err != nil {
		return err
	}
	res.CreateSeconds = time.Since(start).Seconds()
	fmt.Fprintf(stderr, "many-policies: created in %.0f s; waiting %s until they are idle\n", res.CreateSeconds, o.idleAfter)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.idleAfter):
	}

	m := meter{o: o, client: client, rdb: rdb, my: my}
	if res.Idle, err = m.phase(ctx, nil); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "many-policies: idle %+v\n", res.Idle)
	var sessions, errs atomic.Int64
	var firstErr atomic.Value
	load := func(ctx context.Context) { o.load(ctx, client, res.Active, &sessions, &errs, &firstErr) }
	if res.Load, err = m.phase(ctx, load); err != nil {
		return err
	}
	res.SessionsPerSec, res.Errors = float64(sessions.Load())/res.Load.Seconds, errs.Load()
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	fmt.Fprintf(stderr, "many-policies: load %+v, %.0f sessions/s, %d errors\n", res.Load, res.SessionsPerSec, res.Errors)
	if res.After, err = m.phase(ctx, nil); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "many-policies: after %+v\n", res.After)
	if res.Quiet, err = m.phase(ctx, nil); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "many-policies: quiet %+v\n", res.Quiet)
	return json.NewEncoder(stdout).Encode(res)
}

// create PUTs the policies, createConns at a time.
func (o manyOptions) create(ctx context.Context, client *http.Client) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var first error
	var mu sync.Mutex
	for range o.createConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= o.policies {
					return
				}
				err := o.do(ctx, client, http.MethodPut, "/admin/policies/"+o.name(i),
					`{"quotaType":"COUNT","totalLimit":1000000000,"leakThresholdSeconds":60}`, nil)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// load runs apply → finish sessions on the first n resources until ctx ends.
func (o manyOptions) load(ctx context.Context, client *http.Client, n int, sessions, errs *atomic.Int64, first *atomic.Value) {
	var wg sync.WaitGroup
	for range o.connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r := o.name(rand.IntN(n))
				var out struct {
					SessionID string `json:"sessionId"`
				}
				err := o.do(ctx, client, http.MethodPost, "/quota/apply", `{"resourceName":"`+r+`","clientId":"bench","applyAmount":1}`, &out)
				if err == nil {
					err = o.do(ctx, client, http.MethodPost, "/quota/finish",
						`{"resourceName":"`+r+`","clientId":"bench","sessionId":"`+out.SessionID+`","actualUsedAmount":1}`, nil)
				}
				switch {
				case ctx.Err() != nil:
				case err != nil:
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
				default:
					sessions.Add(1)
				}
			}
		}()
	}
	wg.Wait()
}

func (o manyOptions) do(ctx context.Context, client *http.Client, method, path, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, o.url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.adminToken != "" && strings.HasPrefix(path, "/admin/") {
		req.Header.Set("Authorization", "Bearer "+o.adminToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// meter measures phases.
type meter struct {
	o      manyOptions
	client *http.Client
	rdb    *redis.Client
	my     statusReader
}

// phase runs work (nil: nothing) for o.phase and measures it: Redis
// commands and MySQL statements per second, three scrapes (the slowest
// kept) and the last one's heap and RSS.
func (m meter) phase(ctx context.Context, work func(ctx context.Context)) (ManyPhase, error) {
	var p ManyPhase
	r0, err := m.redisCalls(ctx)
	if err != nil {
		return p, err
	}
	q0, err := m.my.questions(ctx)
	if err != nil {
		return p, err
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, m.o.phase)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if work != nil {
			work(wctx)
		} else {
			<-wctx.Done()
		}
	}()
	for i := range 3 { // scrapes at 1/4, 2/4 and 3/4 of the phase
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(time.Until(start.Add(m.o.phase * time.Duration(i+1) / 4))):
		}
		if err := m.scrape(ctx, &p); err != nil {
			return p, err
		}
	}
	<-done
	p.Seconds = time.Since(start).Seconds()
	if m.o.pprofURL != "" {
		live, err := m.liveHeap(ctx)
		if err != nil {
			return p, err
		}
		p.HeapLiveBytes = live
	}
	r1, err := m.redisCalls(ctx)
	if err != nil {
		return p, err
	}
	q1, err := m.my.questions(ctx)
	if err != nil {
		return p, err
	}
	p.RedisCmdsPerSec = float64(r1-r0) / p.Seconds
	p.MySQLPerSec = float64(q1-q0) / p.Seconds
	return p, nil
}

// redisCalls is the sum of INFO commandstats calls, INFO's own left out.
func (m meter) redisCalls(ctx context.Context) (int64, error) {
	info, err := m.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("redis info: %w", err)
	}
	var n int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "info" || name == "hello" || name == "client|setinfo" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			n += c
		}
	}
	return n, nil
}

// scrape reads /metrics once into p: the slowest time, and the size,
// samples, heap and RSS of the last.
func (m meter) scrape(ctx context.Context, p *ManyPhase) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.o.url+"/metrics", nil)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := m.client.Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	p.ScrapeSeconds = max(p.ScrapeSeconds, time.Since(start).Seconds())
	p.ScrapeBytes, p.Samples = len(b), 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		p.Samples++
		name, v, _ := strings.Cut(line, " ")
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "go_memstats_heap_inuse_bytes":
			p.HeapBytes = f
		case "go_memstats_next_gc_bytes":
			p.HeapLiveBytes = f / 2
		case "process_resident_memory_bytes":
			p.RSSBytes = f
		}
	}
	return nil
}

// liveHeap forces a GC in the server (/debug/pprof/heap?gc=1) and answers
// its HeapAlloc then (the "# HeapAlloc = N" line of debug=1's text): the
// live heap, in bytes. The GC runs after the phase's figures were taken.
func (m meter) liveHeap(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.o.pprofURL+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("pprof heap: no HeapAlloc line (status %d)", resp.StatusCode)
}
