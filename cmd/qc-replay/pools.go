package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// poolsConfig is the command line of `qc-replay pools`.
type poolsConfig struct {
	Trace       string
	Rows        int
	Lines       int
	Bursts      []float64
	BurstMin    int
	Period      time.Duration
	Limit       int64
	LimitFactor float64
	LimitBasis  string // "peak" or "mean"
	MaxTokens   int64
	Settings    pools.Settings
	Events      bool
	JSON        bool       // one JSON object (poolsReport) instead of the table
	FromMin     float64    // the trace's window, minutes from its first row
	ToMin       float64    // 0 = to its end
	Seed        uint64     // line assignment (pools.SplitOptions.Seed)
	Equal       bool       // lines declared with equal shares (pools.SplitOptions.EqualShares)
	Speedup     float64    // > 0: the live run on the trace\'s clock, this many times faster
	Live        liveConfig // URL set: also replay against a running service
}

func parsePoolsFlags(args []string, stderr io.Writer) (poolsConfig, error) {
	c := poolsConfig{Settings: pools.DefaultSettings()}
	fs := flag.NewFlagSet("qc-replay pools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Trace, "trace", defaultTrace, "trace CSV with columns TIMESTAMP, ContextTokens, GeneratedTokens")
	fs.IntVar(&c.Rows, "rows", 0, "use only the first N rows (0: all)")
	fs.IntVar(&c.Lines, "lines", 12, "business lines (a quarter CORE, a third GROWTH, the rest EXPLORE)")
	burst := fs.String("burst", "3,4,5", "comma-separated burst factors, one burst per factor (\"\" = none)")
	fs.IntVar(&c.BurstMin, "burst-minutes", 5, "length of each burst, minutes")
	fs.DurationVar(&c.Period, "period", DefaultPoolsPeriod, "quota period (the limit is per period)")
	fs.Int64Var(&c.Limit, "limit", 0, "limit per period; 0 = the trace's demand per period (bursts excluded) by --limit-basis, × --limit-factor")
	fs.StringVar(&c.LimitBasis, "limit-basis", "peak", "peak: the highest demand of a period; mean: the mean demand per period")
	fs.Float64Var(&c.LimitFactor, "limit-factor", DefaultLimitFactor, "see --limit")
	fs.Int64Var(&c.MaxTokens, "max-tokens", 512, "tokens reserved per request on top of ContextTokens")
	fs.Int64Var(&c.Settings.SharedPercent, "shared", 60, "sharedPercent")
	fs.Int64Var(&c.Settings.DedicatedPercent, "dedicated", 30, "dedicatedPercent")
	fs.Int64Var(&c.Settings.BufferPercent, "buffer", 10, "bufferPercent")
	fs.Int64Var(&c.Settings.BorrowLimitPercent, "borrow-limit", 50, "borrowLimitPercent (of a line's dedicated part)")
	fs.BoolVar(&c.Events, "events", false, "print the controller's decisions of the elastic run")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object: the figures of the three runs (and of the live run with --url)")
	fs.Float64Var(&c.FromMin, "from", 0, "use the trace from this minute (from its first row)")
	fs.Float64Var(&c.ToMin, "to", 0, "use the trace up to this minute (0: its end)")
	fs.Uint64Var(&c.Seed, "seed", 0, "line assignment: another seed sends every row to another line (0: the shipped one)")
	fs.BoolVar(&c.Equal, "equal-shares", true, "declare every line with the same weight (fixed equal shares; demand stays unequal)")
	fs.StringVar(&c.Live.URL, "url", "", "also replay the workload (its first --rows requests) against this running quota-center, on --resource with these lines")
	fs.StringVar(&c.Live.Resource, "resource", "llm_lines", "resource created for the live run")
	fs.StringVar(&c.Live.AdminToken, "admin-token", "", "admin bearer token (live run)")
	fs.StringVar(&c.Live.APIKey, "api-key", "", "client API key (live run)")
	fs.IntVar(&c.Live.Concurrency, "concurrency", 16, "concurrent workers (live run)")
	fs.Float64Var(&c.Speedup, "speedup", 0, "live run on the trace's clock made this many times faster (period / speedup whole seconds), elasticity OFF, compared with the model; 0 = at full speed")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return c, &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	for _, f := range strings.Split(*burst, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 1 || v > 20 {
			return c, &usageError{fmt.Sprintf("--burst: %q is not a factor in 1 … 20", f)}
		}
		c.Bursts = append(c.Bursts, v)
	}
	switch {
	case c.Lines < 3 || c.Lines > pools.MaxLines:
		return c, &usageError{fmt.Sprintf("--lines must be 3 … %d", pools.MaxLines)}
	case c.Rows < 0:
		return c, &usageError{"--rows must not be negative"}
	case c.BurstMin < 1:
		return c, &usageError{"--burst-minutes must be at least 1"}
	case c.Period < time.Second:
		return c, &usageError{"--period must be at least 1s"}
	case c.Limit < 0 || c.Limit > pools.MaxAmount:
		return c, &usageError{"--limit must be in 0 … 2^53-1"}
	case c.Speedup < 0:
		return c, &usageError{"--speedup must not be negative"}
	case c.LimitBasis != "peak" && c.LimitBasis != "mean":
		return c, &usageError{"--limit-basis must be peak or mean"}
	case c.LimitFactor <= 0:
		return c, &usageError{"--limit-factor must be positive"}
	case c.FromMin < 0 || (c.ToMin != 0 && c.ToMin <= c.FromMin):
		return c, &usageError{"--from must be ≥ 0 and --to (when given) past it"}
	case c.MaxTokens < 0:
		return c, &usageError{"--max-tokens must not be negative"}
	}
	if err := c.Settings.Validate(); err != nil {
		return c, &usageError{err.Error()}
	}
	return c, nil
}

// seed003 are the figures seed 003 reports for static quotas and for pools
// with tiers and elasticity (it gives no separate pools-only figure).
var seed003 = map[pools.Scheme][3]string{
	pools.SchemeStatic:  {"32%", "8.7%", "68%"},
	pools.SchemePools:   {"–", "–", "–"},
	pools.SchemeElastic: {"11%", "0.9%", "89%"},
}

// runPools is `qc-replay pools`: split the trace into business lines, inject
// bursts, and compare static quotas, pools, and pools with tiers and
// elasticity on a simulated clock.
func runPools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parsePoolsFlags(args, stderr)
	if err != nil {
		return err
	}
	rows, err := loadRows(cfg.Trace, cfg.Rows)
	if err != nil {
		return err
	}
	tr := window(rows, cfg.FromMin, cfg.ToMin)
	if len(tr) == 0 {
		return fmt.Errorf("the trace has no rows from minute %g to %g", cfg.FromMin, cfg.ToMin)
	}
	opt := pools.SplitOptions{Lines: cfg.Lines, MaxTokens: cfg.MaxTokens, BurstFactors: cfg.Bursts, BurstMs: int64(cfg.BurstMin) * 60_000,
		Seed: cfg.Seed, EqualShares: cfg.Equal}
	w := pools.SplitTrace(tr, opt)
	periodMs := cfg.Period.Milliseconds()
	limit := cfg.Limit
	if limit == 0 {
		limit = sizeLimit(tr, periodMs, cfg.LimitBasis, cfg.LimitFactor)
	}
	out := stdout
	if cfg.JSON {
		out = io.Discard
	}
	fmt.Fprintf(out, "qc-replay pools: %d rows of %s → %d requests on %d lines, bursts %v × %d min, period %s, limit %d per period\n",
		len(rows), cfg.Trace, len(w.Requests), cfg.Lines, cfg.Bursts, cfg.BurstMin, cfg.Period, limit)
	fmt.Fprintf(out, "pools: shared %d%% / dedicated %d%% / buffer %d%%, borrowLimit %d%% of dedicated\n",
		cfg.Settings.SharedPercent, cfg.Settings.DedicatedPercent, cfg.Settings.BufferPercent, cfg.Settings.BorrowLimitPercent)
	for _, b := range w.Bursts {
		fmt.Fprintf(out, "burst: %s ×%g from %s to %s\n", b.Line, b.Factor, time.Duration(b.StartMs)*time.Millisecond, time.Duration(b.EndMs)*time.Millisecond)
	}
	var results []pools.Result
	for _, s := range []pools.Scheme{pools.SchemeStatic, pools.SchemePools, pools.SchemeElastic} {
		r, err := pools.Simulate(w, pools.SimConfig{Scheme: s, Limit: limit, PeriodMs: periodMs, Settings: cfg.Settings})
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	printPoolsTable(out, results)
	rep := newPoolsReport(cfg, limit, w, results)
	if cfg.Live.URL != "" {
		live := cfg.Live
		live.Limit, live.Settings, live.Period = limit, cfg.Settings, cfg.Period
		if cfg.Speedup > 0 {
			// The service's controller ticks on its own clock, which a
			// speed-up cannot scale: the timed run has elasticity OFF (tiers,
			// watermarks, pools and borrowing, the whole apply), and so has
			// the model it is compared with.
			live.Settings.Elasticity = pools.ElasticityOff
			model, err := pools.Simulate(w, pools.SimConfig{Scheme: pools.SchemeElastic, Limit: limit, PeriodMs: periodMs, Settings: live.Settings})
			if err != nil {
				return err
			}
			server, err := runLiveTimed(ctx, live, w, cfg.Speedup, model)
			if err != nil {
				return err
			}
			rep.Speed = newSpeedReport(cfg.Speedup, server, model)
			fmt.Fprintf(out, "live %s at ×%g: server %+v\nmodel %+v\nlargest difference %.2f points\n", live.URL, cfg.Speedup,
				rep.Speed.Server, rep.Speed.Model, rep.Speed.MaxDifferencePp)
		} else {
			lr, err := runLive(ctx, live, w, out)
			if err != nil {
				return err
			}
			rep.Live = &lr
		}
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if cfg.Events {
		for _, e := range results[2].Events {
			fmt.Fprintf(stdout, "event %8s %-18s %-10s %10d %s\n", time.Duration(e.AtMs)*time.Millisecond, e.Kind, e.Line, e.Amount, e.Reason)
		}
	}
	return nil
}

func printPoolsTable(out io.Writer, results []pools.Result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheme\tidle %\trefused in bursts %\tutilisation %\trefused %\tCORE refused (critical)\treaction s (n)\tseed 003: idle / burst refused / util\t")
	for _, r := range results {
		react := "–"
		if s, n := r.MeanReactionSeconds("any"); n > 0 {
			react = fmt.Sprintf("%.0f (%d)", s, n)
		}
		sd := seed003[r.Scheme]
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d (%d)\t%s\t%s / %s / %s\t\n", r.Scheme, r.IdlePct(), r.BurstRefusedPct(),
			r.UtilisationPct(), r.RefusedPct(), r.CoreRefused, r.CoreCritRefused, react, sd[0], sd[1], sd[2])
	}
	tw.Flush()
	for _, r := range results {
		fmt.Fprintf(out, "%s: %d requests, %d refused %v; %d periods, %d offered, %d charged\n",
			r.Scheme, r.Requests, r.Refused, r.RefusedByReason, r.Periods, r.QuotaOffered, r.Charged)
	}
}
