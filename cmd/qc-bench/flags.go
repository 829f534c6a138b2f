package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

type watchFlag []watched

type watched struct {
	Name string
	PID  int
}

func (w *watchFlag) String() string { return fmt.Sprint(*w) }

func (w *watchFlag) Set(s string) error {
	name, pid, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(pid)
	if !ok || name == "" || err != nil || n <= 0 {
		return fmt.Errorf("want NAME=PID, got %q", s)
	}
	*w = append(*w, watched{name, n})
	return nil
}

type headerFlag http.Header

func (h headerFlag) String() string { return fmt.Sprint(http.Header(h)) }

func (h headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want 'Name: value', got %q", s)
	}
	http.Header(h).Add(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

type options struct {
	url, scenario, label, resource, clientID, metricsURL string
	connections, rep, pool                               int
	duration, warmup, timeout, sampleEvery               time.Duration
	amount, actual                                       int64
	watch                                                watchFlag
	header                                               http.Header
}

func parseRun(args []string) (options, error) {
	o := options{header: http.Header{}}
	fs := flag.NewFlagSet("qc-bench", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:18080", "server base URL (loopback only)")
	fs.StringVar(&o.scenario, "scenario", ScenarioApply, "apply, session, heartbeat-session or heartbeat")
	fs.IntVar(&o.connections, "connections", 50, "connections = workers, each with one request in flight")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load first, on the same connections (0 = none)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.StringVar(&o.label, "label", "", "name of the server under test, copied to the output (e.g. baseline, quota-center)")
	fs.IntVar(&o.rep, "rep", 0, "repetition number, copied to the output")
	fs.StringVar(&o.resource, "resource", "bench", "resourceName in every request (its policy must exist)")
	fs.StringVar(&o.clientID, "client-id", "", "clientId sent with each apply (empty = none)")
	fs.Int64Var(&o.amount, "amount", 1, "applyAmount")
	fs.Int64Var(&o.actual, "actual", 1, "actualUsedAmount")
	fs.IntVar(&o.pool, "heartbeat-pool", 1000, "sessions opened before a heartbeat scenario")
	fs.Var(&o.watch, "watch", "NAME=PID: record that process's CPU and RSS (repeatable)")
	fs.StringVar(&o.metricsURL, "metrics-url", "", "Prometheus endpoint to read go_goroutines from (loopback only)")
	fs.DurationVar(&o.sampleEvery, "sample-every", 0, "sample RSS and goroutines this often during the window (0 = off)")
	fs.Var(headerFlag(o.header), "header", "'Name: value' added to every request (repeatable)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if _, err := stepsOf(o.scenario); err != nil {
		return o, err
	}
	if err := loopbackOnly(o.url); err != nil {
		return o, err
	}
	if o.metricsURL != "" {
		if err := loopbackOnly(o.metricsURL); err != nil {
			return o, err
		}
	}
	switch {
	case o.connections < 1 || o.connections > 5000:
		return o, fmt.Errorf("--connections must be 1…5000")
	case o.duration <= 0 || o.duration > MaxDuration:
		return o, fmt.Errorf("--duration must be in (0, %s]", MaxDuration)
	case o.warmup < 0 || o.warmup > MaxDuration:
		return o, fmt.Errorf("--warmup must be in [0, %s]", MaxDuration)
	case o.pool < 1 || o.pool > 100000:
		return o, fmt.Errorf("--heartbeat-pool must be 1…100000")
	}
	o.header.Set("Content-Type", "application/json")
	return o, nil
}

// loopbackOnly refuses any target that is not on this machine's loopback.
func loopbackOnly(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" {
		return fmt.Errorf("%s: only http:// is supported", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s: the load generator only targets loopback addresses (127.0.0.0/8, ::1, localhost)", raw)
}
