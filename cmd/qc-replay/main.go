// Command qc-replay replays an LLM inference trace through quota-center and
// checks that the server's accounting matches what the replay was charged.
//
// Each row of the trace (a CSV with the columns TIMESTAMP, ContextTokens and
// GeneratedTokens, found by header name) becomes one session on a TOKENS
// resource: apply ContextTokens + --max-tokens (the most the call may use),
// then finish with ContextTokens + GeneratedTokens (what it did use), so the
// server refunds the unused part of the reservation or charges the overage.
// Each apply uses a fresh session id, and a call failing with 503
// BACKEND_UNAVAILABLE or a transport error is retried up to 3 times with the
// same session id (apply and finish are idempotent by session id).
//
// With --limit the resource's policy is created or updated first (TOKENS,
// that totalLimit, never resets); set it below the trace's total to see part
// of the trace refused with 429.
//
// At the end it prints the counts, token totals, latencies and throughput,
// and checks GET /quota/status: usedAmount must have gone up by exactly the
// tokens this run was charged and reservedAmount must be back where it was.
// No one else may use the resource during the run. It exits non-zero when the
// check fails or any call failed other than with 429.
//
// Usage:
//
//	qc-replay [--url http://127.0.0.1:8080] [--trace file.csv] [--resource llm_tokens]
//	          [--limit N] [--max-tokens 512] [--concurrency 16] [--speedup 0] [--rows 0]
//	          [--admin-token T] [--api-key K] [--client-id qc-replay] [--timeout 10s]
//	qc-replay pools [flags]   (business lines, pools and elasticity on a simulated clock; see pools.go)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// version is set at build time with -ldflags '-X main.version=...'.
var version = "dev"

// defaultTrace is the Azure LLM code trace, read at run time from the shared
// data directory (never copied into the repository).
const defaultTrace = "../shared/data/azure-llm-trace-2023/AzureLLMInferenceTrace_code.csv"

// config is the parsed command line.
type config struct {
	URL         string
	Trace       string
	Resource    string
	Limit       int64
	MaxTokens   int64
	Concurrency int
	Speedup     float64
	Rows        int
	AdminToken  string
	APIKey      string
	ClientID    string
	Timeout     time.Duration
}

// usageError is a bad command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// errCheckFailed is returned when the balance check fails.
var errCheckFailed = errors.New("check failed")

// parseFlags parses args into a config. -h gives flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("qc-replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "quota-center base URL")
	fs.StringVar(&c.Trace, "trace", defaultTrace, "trace CSV with columns TIMESTAMP, ContextTokens, GeneratedTokens")
	fs.StringVar(&c.Resource, "resource", "llm_tokens", "TOKENS resource to charge")
	fs.Int64Var(&c.Limit, "limit", 0, "when > 0, create or update the resource's policy first: TOKENS, this totalLimit, never resets")
	fs.Int64Var(&c.MaxTokens, "max-tokens", 512, "tokens reserved per request on top of ContextTokens")
	fs.IntVar(&c.Concurrency, "concurrency", 16, "concurrent workers")
	fs.Float64Var(&c.Speedup, "speedup", 0, "0: as fast as possible; else replay the trace's inter-arrival gaps divided by this")
	fs.IntVar(&c.Rows, "rows", 0, "replay only the first N rows (0: all)")
	fs.StringVar(&c.AdminToken, "admin-token", "", "admin bearer token (for --limit)")
	fs.StringVar(&c.APIKey, "api-key", "", "client API key (X-API-Key)")
	fs.StringVar(&c.ClientID, "client-id", "qc-replay", "clientId sent with each apply")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "timeout of each HTTP call")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, &usageError{err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return c, &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case c.Concurrency < 1:
		return c, &usageError{"--concurrency must be at least 1"}
	case c.Speedup < 0:
		return c, &usageError{"--speedup must not be negative"}
	case c.Rows < 0:
		return c, &usageError{"--rows must not be negative"}
	case c.Limit < 0 || c.Limit > client.MaxAmount:
		return c, &usageError{"--limit must be in 0 … 2^53-1"}
	case c.MaxTokens < 1 || c.MaxTokens > client.MaxAmount/2:
		return c, &usageError{"--max-tokens must be in 1 … 2^52"}
	case c.Resource == "":
		return c, &usageError{"--resource must not be empty"}
	case c.Trace == "":
		return c, &usageError{"--trace must not be empty"}
	case c.Timeout <= 0:
		return c, &usageError{"--timeout must be positive"}
	}
	return c, nil
}

// run is the whole command: parse args, optionally set the policy, replay
// the trace, print the report and check the balance. It returns an error
// when anything failed, including the check and any non-429 call error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "pools" {
		return runPools(ctx, args[1:], stdout, stderr)
	}
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rows, err := loadRows(cfg.Trace, cfg.Rows)
	if err != nil {
		return err
	}
	c, err := client.New(cfg.URL,
		client.WithAPIKey(cfg.APIKey),
		client.WithAdminToken(cfg.AdminToken),
		client.WithTimeout(cfg.Timeout),
		client.WithUserAgent("qc-replay/1"),
	)
	if err != nil {
		return &usageError{err.Error()}
	}
	defer c.HTTPClient().CloseIdleConnections()

	fmt.Fprintf(stdout, "qc-replay %s: %d rows of %s → %s, resource %q, max-tokens %d, concurrency %d, speedup %g\n",
		version, len(rows), cfg.Trace, c.BaseURL(), cfg.Resource, cfg.MaxTokens, cfg.Concurrency, cfg.Speedup)

	if cfg.Limit > 0 {
		p, err := c.PutPolicy(ctx, client.PolicySpec{
			ResourceName: cfg.Resource,
			QuotaType:    client.QuotaTypeTokens,
			TotalLimit:   cfg.Limit,
			ResetCron:    "",
		})
		if err != nil {
			return fmt.Errorf("put policy %s: %w", cfg.Resource, err)
		}
		verb := "updated"
		if p.Created {
			verb = "created"
		}
		fmt.Fprintf(stdout, "policy %s %s: %s totalLimit=%d resetCron=%q\n", p.ResourceName, verb, p.QuotaType, p.TotalLimit, p.ResetCron)
	}

	before, err := c.Status(ctx, cfg.Resource)
	if errors.Is(err, client.ErrResourceNotFound) {
		return fmt.Errorf("resource %q has no policy: create it, or pass --limit to have qc-replay create it: %w", cfg.Resource, err)
	}
	if err != nil {
		return fmt.Errorf("status before the run: %w", err)
	}
	if before.QuotaType != client.QuotaTypeTokens {
		fmt.Fprintf(stderr, "qc-replay: warning: resource %q counts %s, not TOKENS\n", cfg.Resource, before.QuotaType)
	}
	printStatus(stdout, "status before", before)

	start := time.Now()
	st := replay(ctx, c, rows, replayOptions{
		Resource:    cfg.Resource,
		ClientID:    cfg.ClientID,
		MaxTokens:   cfg.MaxTokens,
		Concurrency: cfg.Concurrency,
		Speedup:     cfg.Speedup,
		Backoff:     50 * time.Millisecond,
	})
	wall := time.Since(start)
	PrintSummary(stdout, st, wall)

	// The final status is read even after an interrupt: every started row
	// was completed, so the check still holds for what was replayed.
	after, err := c.Status(context.WithoutCancel(ctx), cfg.Resource)
	if err != nil {
		return fmt.Errorf("status after the run: %w", err)
	}
	printStatus(stdout, "status after", after)

	var errs []error
	if fails := Check(before, after, st.TokensCharged); len(fails) > 0 {
		fmt.Fprintf(stdout, "check: FAILED: %s\n", joinFails(fails))
		errs = append(errs, errCheckFailed)
	} else {
		fmt.Fprintf(stdout, "check: OK\n")
	}
	if n := st.ErrorCount(); n > 0 {
		errs = append(errs, fmt.Errorf("%d call(s) failed other than with 429", n))
	}
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("interrupted after %d of %d rows", st.Rows, len(rows)))
	}
	return errors.Join(errs...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "qc-replay:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		os.Exit(2)
	}
	os.Exit(1)
}
