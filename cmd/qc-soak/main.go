// Command qc-soak drives quota-center with thousands of sessions for a
// bounded time while breaking its backends at random, then checks that
// nothing was over-granted, lost or double-counted (issue 3 §9).
//
// It starts everything itself: a private redis-server and mariadbd on free
// loopback ports (never the shared 6379/3306 servers) and quota-center
// in-process (internal/app), using the helpers of internal/faults. Faults,
// one at a time at random moments: Redis CLIENT PAUSE past the service's
// timeout, Redis killed and restarted empty, FLUSHALL, SCRIPT FLUSH, Redis
// replies arriving after the timeout (the command ran), KILL of the
// service's MySQL connections, MariaDB stopped and restarted, MySQL answers
// lost with their connection (the statement ran).
//
//	qc-soak [flags] [-- extra quota-center serve flags]
//
// It prints the faults, the answers counted by code, and one PASS/FAIL line
// per invariant (NOTE lines are observations), and exits 1 on any FAIL, 2
// when it could not run. `make soak` runs it through scripts/soak.sh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/quotacenter/quota-center/internal/faults"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	duration       time.Duration
	workers        int
	seed           uint64
	dir            string
	keep           bool
	verbose        bool
	gapMin, gapMax time.Duration
	period         string
	hotLimit       int64
	faultList      string
	serveArgs      []string
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("qc-soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "how long clients run and faults are injected (then settling and checks take a few more seconds)")
	fs.IntVar(&o.workers, "workers", 16, "concurrent clients")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed of the clients and the fault schedule (0 = random; printed)")
	fs.StringVar(&o.dir, "dir", "", "working directory for the servers and logs (default: a new temporary directory)")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (it is always kept when a check fails)")
	fs.BoolVar(&o.verbose, "v", false, "print progress of the servers and faults as they happen")
	fs.DurationVar(&o.gapMin, "fault-gap-min", 3*time.Second, "shortest calm between two faults")
	fs.DurationVar(&o.gapMax, "fault-gap-max", 7*time.Second, "longest calm between two faults")
	fs.StringVar(&o.period, "hot-period", "@every 15s", "resetCron of the contended resource")
	fs.Int64Var(&o.hotLimit, "hot-limit", 3000, "totalLimit per period of the contended resource")
	fs.StringVar(&o.faultList, "faults", "", "comma-separated faults to draw from (default: all of "+faultNames()+
		"; also known: "+string(faults.RedisRestartBehindProxy)+")")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: qc-soak [flags] [-- extra quota-center serve flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.serveArgs = fs.Args()
	if o.duration <= 0 || o.workers <= 0 || o.gapMin <= 0 || o.gapMax < o.gapMin {
		return o, errors.New("qc-soak: --duration, --workers and the fault gaps must be positive (min ≤ max)")
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	return o, nil
}

func faultNames() string {
	var n []string
	for _, f := range faults.AllFaults {
		n = append(n, string(f))
	}
	return strings.Join(n, ",")
}

func pickFaults(list string) ([]faults.Fault, error) {
	if list == "" {
		return faults.AllFaults, nil
	}
	known := map[string]faults.Fault{}
	for _, f := range faults.KnownFaults {
		known[string(f)] = f
	}
	var out []faults.Fault
	for _, name := range strings.Split(list, ",") {
		f, ok := known[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("unknown fault %q (known: %s,%s)", name, faultNames(), faults.RedisRestartBehindProxy)
		}
		out = append(out, f)
	}
	return out, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	pool, err := pickFaults(o.faultList)
	if err != nil {
		fmt.Fprintln(stderr, "qc-soak:", err)
		return 2
	}
	if err := faults.Available(); err != nil {
		fmt.Fprintf(stderr, "qc-soak: cannot start private servers: %v\n", err)
		return 2
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "qc-soak-"); err != nil {
			fmt.Fprintln(stderr, "qc-soak:", err)
			return 2
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "qc-soak:", err)
		return 2
	}
	code := soak(o, pool, dir, stdout, stderr)
	if code == 0 && !o.keep && o.dir == "" {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(stdout, "working directory kept: %s (quota-center.log, redis/, mariadb/error.log, drivers.log)\n", dir)
	}
	return code
}

func soak(o options, pool []faults.Fault, dir string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(stdout, "[%6.1fs] "+format+"\n", append([]any{time.Since(started).Seconds()}, args...)...)
	}
	var logf faults.Logf
	if o.verbose {
		logf = func(format string, args ...any) { say(format, args...) }
	}
	if f, err := os.Create(filepath.Join(dir, "drivers.log")); err == nil {
		faults.RedirectDriverLogs(f)
		defer f.Close()
	}

	say("qc-soak: duration %s, %d clients, seed %d, faults from {%s}", o.duration, o.workers, o.seed, faultNamesOf(pool))
	say("starting private redis-server and mariadbd, then quota-center (%s)", dir)
	env, err := faults.StartEnv(ctx, faults.EnvOptions{Dir: dir, Logf: logf, ServeArgs: o.serveArgs})
	if err != nil {
		fmt.Fprintf(stderr, "qc-soak: start: %v\n", err)
		return 2
	}
	defer func() {
		if err := env.Close(); err != nil {
			fmt.Fprintf(stderr, "qc-soak: close: %v\n", err)
		}
	}()
	say("redis %s, mariadb %s, quota-center %s", env.Redis.Addr(), env.MariaDB.Addr(), env.URL)

	resources := []faults.Resource{
		{Name: "soak-hot", Limit: o.hotLimit, ResetCron: o.period, LeakThresholdSeconds: 2, MaxAmount: 100},
		{Name: "soak-long", Limit: 1_000_000_000, LeakThresholdSeconds: 2, MaxAmount: 100},
	}
	for _, r := range resources {
		if err := env.PutPolicy(ctx, r); err != nil {
			fmt.Fprintf(stderr, "qc-soak: policy %s: %v\n", r.Name, err)
			return 2
		}
		cron := r.ResetCron
		if cron == "" {
			cron = "never resets"
		}
		say("policy %s: TOKENS, limit %d, %s, leakThresholdSeconds %d, applies of 1…%d", r.Name, r.Limit, cron, r.LeakThresholdSeconds, r.MaxAmount)
	}
	w, err := env.StartWorkload(faults.WorkloadConfig{Resources: resources, Workers: o.workers, Seed: o.seed})
	if err != nil {
		fmt.Fprintf(stderr, "qc-soak: %v\n", err)
		return 2
	}

	// Faults at random moments: every kind once in a random order, then
	// random draws, until the duration is up.
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	order := append([]faults.Fault(nil), pool...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	end := started.Add(o.duration)
	var injected []faults.Injection
	infraErr := false
	for i := 0; ctx.Err() == nil; i++ {
		gap := o.gapMin + time.Duration(rng.Int64N(int64(o.gapMax-o.gapMin)+1))
		if time.Now().Add(gap + 5*time.Second).After(end) {
			break // no time left for a fault and its recovery
		}
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
		if ctx.Err() != nil {
			break
		}
		f := pool[rng.IntN(len(pool))]
		if i < len(order) {
			f = order[i]
		}
		in := env.Inject(ctx, f, faults.DefaultFaultTimings)
		injected = append(injected, in)
		say("fault %-24s %s (back after %s)", in.Fault, in.Detail, in.Took.Round(time.Millisecond))
		if in.Err != nil {
			say("fault %s could not be injected: %v", f, in.Err)
			infraErr = true
			break
		}
	}
	select {
	case <-ctx.Done():
		say("interrupted: stopping the clients and checking what ran")
	case <-time.After(time.Until(end)):
	}
	say("stopping the clients (each ends its session; finishes are retried)")
	if err := w.Stop(); err != nil {
		fmt.Fprintf(stderr, "qc-soak: %v\n", err)
		return 2
	}
	clientTime := time.Since(started)
	say("settling: waiting for the sweeper, then POST /admin/reconcile")
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reports, err := env.Settle(sctx, resources)
	if err != nil {
		fmt.Fprintf(stderr, "qc-soak: settle: %v\n", err)
		return 2
	}
	checks, err := env.Verify(sctx, w)
	if err != nil {
		fmt.Fprintf(stderr, "qc-soak: verify: %v\n", err)
		return 2
	}

	rec := w.Recorder()
	sessions := rec.Sessions()
	var granted, refused, abandoned, finished int
	for _, s := range sessions {
		switch {
		case s.Applied:
			granted++
			if s.Abandoned {
				abandoned++
			}
			if s.Finished {
				finished++
			}
		case s.ApplyTries > 0:
			refused++
		}
	}
	answers := len(rec.Answers())
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "== summary (seed %d)\n", o.seed)
	fmt.Fprintf(stdout, "clients ran %s: %d sessions (%d granted, %d refused, %d abandoned to leak, %d finished), %d requests (%.0f/s)\n",
		clientTime.Round(100*time.Millisecond), len(sessions), granted, refused, abandoned, finished, answers, float64(answers)/clientTime.Seconds())
	fmt.Fprintf(stdout, "\n== faults (%d)\n", len(injected))
	for _, in := range injected {
		fmt.Fprintf(stdout, "  +%5.1fs %s\n", in.At.Sub(started).Seconds(), in)
	}
	fmt.Fprintf(stdout, "\n== reconciliation after the run (last pass per resource)\n")
	for _, r := range lastReports(reports) {
		fmt.Fprintf(stdout, "  %s\n", r)
	}
	fmt.Fprintf(stdout, "\n== answers by code\n%s", rec.Table())
	fmt.Fprintf(stdout, "\n== checks\n%s", faults.FormatChecks(checks))
	failed := faults.Failed(checks)
	switch {
	case len(failed) > 0:
		fmt.Fprintf(stdout, "\nRESULT: FAIL (%d invariants violated)\n", len(failed))
		return 1
	case infraErr:
		fmt.Fprintf(stdout, "\nRESULT: INCOMPLETE (a fault could not be injected)\n")
		return 2
	}
	fmt.Fprintf(stdout, "\nRESULT: PASS\n")
	return 0
}

func faultNamesOf(fs []faults.Fault) string {
	var n []string
	for _, f := range fs {
		n = append(n, string(f))
	}
	return strings.Join(n, ", ")
}

// lastReports keeps the last report of each resource.
func lastReports(reps []faults.ReconcileReport) []faults.ReconcileReport {
	var out []faults.ReconcileReport
	seen := map[string]int{}
	for _, r := range reps {
		if i, ok := seen[r.Resource]; ok {
			out[i] = r
			continue
		}
		seen[r.Resource] = len(out)
		out = append(out, r)
	}
	return out
}
