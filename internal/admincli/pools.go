package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/display"
)

// The pools' commands (issue 21 §3): lines, pools, grants, reclaims,
// events and reconcile. Each reads or changes a resource's pools through
// the admin API; a command that also has subcommands (lines set, grants
// void, …) runs its own body when its first argument names none of them.

func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return ts(time.UnixMilli(ms))
}

func pct(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " %" }

// poolsNow is the answer of `admin lines` and `admin pools` with -o json:
// the layout, and what the pools and lines hold now.
type poolsNow struct {
	Layout *client.PoolsConfig `json:"layout"`
	Status *client.PoolStatus  `json:"status"` // nil: no business lines or grants
}

// readPools reads a resource's layout and its pools now, and the unit of
// its amounts.
func readPools(ctx context.Context, c *client.Client, resource string) (poolsNow, string, error) {
	cfg, err := c.Pools(ctx, resource)
	if err != nil {
		return poolsNow{}, "", err
	}
	st, err := c.Status(ctx, resource)
	if err != nil {
		return poolsNow{}, "", err
	}
	return poolsNow{Layout: cfg, Status: st.Pools}, unitOf(st.QuotaType), nil
}

func (g *globals) linesCmd() *ffcli.Command {
	var spec client.LineSpec
	var flags *flag.FlagSet
	set := g.cmd("set", "quota-center admin lines set <resource> <line> --tier CORE|GROWTH|EXPLORE [--weight N | --dedicated N]",
		"create or replace a business line (neither --weight nor --dedicated: weight 1)",
		func(fs *flag.FlagSet) {
			flags = fs
			fs.StringVar(&spec.Tier, "tier", "", "CORE, GROWTH or EXPLORE (required)")
			fs.Int64Var(&spec.Weight, "weight", 0, "its share of the dedicated pool, 1–1000")
			fs.Int64Var(&spec.Dedicated, "dedicated", 0, "an explicit dedicated amount, in the policy's unit")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 2, "the resource and the line"); err != nil {
				return err
			}
			if spec.Tier == "" {
				return errors.New("--tier is required (CORE, GROWTH or EXPLORE)")
			}
			// A flag given as 0 (or below) is refused here: the client
			// leaves a 0 out of the request, and the server reads a line
			// without weight or dedicated as weight 1, so "--weight 0"
			// created a line of weight 1.
			given := map[string]bool{}
			flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
			switch {
			case given["weight"] && given["dedicated"]:
				return errors.New("give --weight or --dedicated, not both")
			case given["weight"] && spec.Weight < 1:
				return errors.New("--weight must be 1 … 1000")
			case given["dedicated"] && spec.Dedicated < 1:
				return errors.New("--dedicated must be at least 1, in the policy's unit")
			}
			if _, err := c.PutLine(ctx, pos[0], pos[1], spec); err != nil {
				return err
			}
			return g.showLines(ctx, c, pos[0])
		})
	del := g.cmd("delete", "quota-center admin lines delete <resource> <line>",
		"remove a business line (refused while it has open sessions)", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 2, "the resource and the line"); err != nil {
				return err
			}
			if _, err := c.DeleteLine(ctx, pos[0], pos[1]); err != nil {
				return err
			}
			return g.showLines(ctx, c, pos[0])
		})
	cmd := g.cmd("lines", "quota-center admin lines <resource> | lines set … | lines delete …",
		"the business lines: tier, dedicated part, used, borrowed, buffer lent and watermark now", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource (or set, delete)"); err != nil {
				return err
			}
			return g.showLines(ctx, c, pos[0])
		})
	cmd.Subcommands = []*ffcli.Command{set, del}
	return cmd
}

func (g *globals) showLines(ctx context.Context, c *client.Client, resource string) error {
	v, u, err := readPools(ctx, c, resource)
	if err != nil {
		return err
	}
	cfg, st := v.Layout, v
	now := map[string]client.LineStatus{}
	if st.Status != nil {
		for _, l := range st.Status.Lines {
			now[l.BusinessLine] = l
		}
	}
	return g.emit(v, func(w *tabwriter.Writer) {
		row(w, "LINE", "TIER", "WEIGHT", "DEDICATED", "USED", "BORROWED", "BORROW LIMIT", "BUFFER", "LENT", "RECLAIMED", "MAY USE", "WATERMARK", "MODE")
		for _, l := range cfg.Lines {
			s, ok := now[l.BusinessLine]
			if !ok { // not yet in the status (no period seeded): the layout's
				s = client.LineStatus{Dedicated: l.Dedicated, BorrowLimit: l.BorrowLimit}
			}
			weight, watermark := "-", "-"
			if ok {
				watermark = pct(s.WatermarkPercent)
			}
			if l.Weight > 0 {
				weight = strconv.FormatInt(l.Weight, 10)
			}
			row(w, l.BusinessLine, l.Tier, weight, display.Amount(u, s.Dedicated), display.Amount(u, s.Used),
				display.Amount(u, s.Borrowed), display.Amount(u, s.BorrowLimit), display.Amount(u, s.Buffer),
				display.Amount(u, s.Lent), display.Amount(u, s.Reclaimed), display.Amount(u, s.MayUse),
				watermark, orDash(s.ElasticityMode))
		}
	})
}

func (g *globals) poolsCmd() *ffcli.Command {
	var flags *flag.FlagSet
	var s client.PoolSettings
	set := g.cmd("set", "quota-center admin pools set <resource> [--shared P] [--dedicated P] [--buffer P] [--borrow-limit P] [--elasticity M] [--reclaim-threshold P] [--reclaim-confirm S] [--dry-run=true|false]",
		"change pool settings: the flags given replace the current values, the others stay",
		func(fs *flag.FlagSet) {
			flags = fs
			fs.Int64Var(&s.SharedPercent, "shared", 0, "the shared pool's share of the limit, %")
			fs.Int64Var(&s.DedicatedPercent, "dedicated", 0, "the lines' dedicated parts' share, %")
			fs.Int64Var(&s.BufferPercent, "buffer", 0, "the reserve's share, % (the three sum to 100)")
			fs.Int64Var(&s.BorrowLimitPercent, "borrow-limit", 0, "how much of the shared pool a line may hold, % of its dedicated part (0–1000)")
			fs.StringVar(&s.Elasticity, "elasticity", "", "AUTO, PREDICTIVE, REACTIVE or OFF")
			fs.Int64Var(&s.ReclaimThresholdPercent, "reclaim-threshold", 0, "reclaims start when the shared pool is this full, % (1–100)")
			fs.Int64Var(&s.ReclaimConfirmSeconds, "reclaim-confirm", 0, "seconds before a warned reclaim is confirmed (0 = by hand only)")
			fs.BoolVar(&s.ReclaimDryRun, "dry-run", false, "record reclaims without moving anything")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			given := map[string]bool{}
			flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
			for _, f := range []string{"url", "token", "o", "timeout"} {
				delete(given, f)
			}
			if len(given) == 0 {
				return errors.New("nothing to change: give at least one of --shared, --dedicated, --buffer, --borrow-limit, --elasticity, --reclaim-threshold, --reclaim-confirm, --dry-run")
			}
			cur, err := c.Pools(ctx, pos[0])
			if err != nil {
				return err
			}
			next := cur.Pools
			for _, f := range []struct {
				name     string
				dst, val *int64
			}{{"shared", &next.SharedPercent, &s.SharedPercent}, {"dedicated", &next.DedicatedPercent, &s.DedicatedPercent},
				{"buffer", &next.BufferPercent, &s.BufferPercent}, {"borrow-limit", &next.BorrowLimitPercent, &s.BorrowLimitPercent},
				{"reclaim-threshold", &next.ReclaimThresholdPercent, &s.ReclaimThresholdPercent},
				{"reclaim-confirm", &next.ReclaimConfirmSeconds, &s.ReclaimConfirmSeconds}} {
				if given[f.name] {
					*f.dst = *f.val
				}
			}
			if given["elasticity"] {
				next.Elasticity = s.Elasticity
			}
			if given["dry-run"] {
				next.ReclaimDryRun = s.ReclaimDryRun
			}
			if _, err := c.PutPoolSettings(ctx, pos[0], next); err != nil {
				return err
			}
			return g.showPools(ctx, c, pos[0])
		})
	cmd := g.cmd("pools", "quota-center admin pools <resource> | pools set …",
		"the pools: settings, sizes, and what the shared pool and the buffer hold now", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource (or set)"); err != nil {
				return err
			}
			return g.showPools(ctx, c, pos[0])
		})
	cmd.Subcommands = []*ffcli.Command{set}
	return cmd
}

func (g *globals) showPools(ctx context.Context, c *client.Client, resource string) error {
	v, u, err := readPools(ctx, c, resource)
	if err != nil {
		return err
	}
	cfg := v.Layout
	p := v.Status
	if p == nil {
		p = &client.PoolStatus{Shared: cfg.Shared, Buffer: cfg.Buffer, BufferFree: cfg.Buffer, Elasticity: cfg.Pools.Elasticity}
	}
	var dedicatedUsed int64
	for _, l := range p.Lines {
		dedicatedUsed += max(0, l.Used-l.Borrowed-l.Buffer)
	}
	s := cfg.Pools
	return g.emit(v, func(w *tabwriter.Writer) {
		row(w, "POOL", "SHARE", "SIZE", "USED", "NOTE")
		row(w, "shared", pct(float64(s.SharedPercent)), display.Amount(u, cfg.Shared), display.Amount(u, p.SharedUsed),
			"buffer released to it: "+display.Amount(u, p.SharedBuffer))
		row(w, "dedicated", pct(float64(s.DedicatedPercent)), display.Amount(u, cfg.Dedicated), display.Amount(u, dedicatedUsed),
			fmt.Sprintf("%d line(s)", len(cfg.Lines)))
		row(w, "buffer", pct(float64(s.BufferPercent)), display.Amount(u, cfg.Buffer), display.Amount(u, p.Buffer-p.BufferFree),
			"free: "+display.Amount(u, p.BufferFree))
		fmt.Fprintf(w, "\nborrow limit %s of a line's dedicated part; elasticity %s; reclaim at %s full, confirmed after %ds, dry run %v\n",
			pct(float64(s.BorrowLimitPercent)), s.Elasticity, pct(float64(s.ReclaimThresholdPercent)), s.ReclaimConfirmSeconds, s.ReclaimDryRun)
	})
}

func (g *globals) grantsCmd() *ffcli.Command {
	var reason string
	void := g.cmd("void", "quota-center admin grants void <resource> <id> [--reason R]",
		"end a grant or release now (what sessions hold of it stays charged; a release gives back what its line still holds of it, and says how much)",
		func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why, for the audit log") },
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 2, "the resource and the grant id"); err != nil {
				return err
			}
			v, err := c.VoidGrantReturning(ctx, pos[0], pos[1], reason)
			if err != nil {
				return err
			}
			out := map[string]any{"voided": pos[1]}
			if v.Kind != "" {
				out["kind"] = v.Kind
			}
			if v.Returned != nil {
				out["returned"] = *v.Returned // a release: the buffer it gave back
			}
			return g.emit(out, func(w *tabwriter.Writer) {
				row(w, "voided", pos[1])
				if v.Returned != nil {
					row(w, "buffer returned", display.Grouped(*v.Returned))
				}
			})
		})
	cmd := g.cmd("grants", "quota-center admin grants <resource> | grants void <resource> <id> [--reason R]",
		"temporary grants and buffer releases not yet expired (add them with grant and release)", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource (or void)"); err != nil {
				return err
			}
			gs, err := c.Grants(ctx, pos[0])
			if err != nil {
				return err
			}
			return g.emit(gs, func(w *tabwriter.Writer) {
				// HELD: what a release's line (or the shared pool) still
				// holds of it; a spare move may have lent the rest on.
				row(w, "ID", "KIND", "LINE", "AMOUNT", "HELD", "USED", "FROM", "UNTIL", "ACTIVE", "VOIDED", "REASON")
				for _, gr := range gs {
					held := "-"
					if gr.Held != nil {
						held = display.Grouped(*gr.Held)
					}
					row(w, gr.ID, gr.Kind, orDash(gr.BusinessLine), display.Grouped(gr.Amount), held, display.Grouped(gr.Used),
						ts(gr.EffectiveAt), tsp(gr.ExpiresAt), gr.Active, tsp(gr.VoidedAt), orDash(oneLine(gr.Reason)))
				}
			})
		})
	cmd.Subcommands = []*ffcli.Command{void}
	return cmd
}

// oneLine folds a free-text reason onto one table line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func (g *globals) reclaimsCmd() *ffcli.Command {
	step := func(confirm bool) *ffcli.Command {
		var reason string
		name, help := "cancel", "cancel a WARNED or CONFIRMED reclaim"
		if confirm {
			name, help = "confirm", "confirm a WARNED reclaim: the controller moves the quota at its next tick"
		}
		return g.cmd(name, "quota-center admin reclaims "+name+" <resource> <id> [--reason R]", help,
			func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why, for the audit log") },
			func(ctx context.Context, c *client.Client, pos []string) error {
				if err := want(pos, 2, "the resource and the reclaim id"); err != nil {
					return err
				}
				r, err := c.ConfirmReclaim(ctx, pos[0], pos[1], confirm, reason)
				if err != nil {
					return err
				}
				return g.emit(r, reclaimTable(*r))
			})
	}
	cmd := g.cmd("reclaims", "quota-center admin reclaims <resource> | reclaims confirm|cancel <resource> <id> [--reason R]",
		"reclaims of dedicated quota from idle lines, newest first; a WARNED one moves unless cancelled", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource (or confirm, cancel)"); err != nil {
				return err
			}
			rs, err := c.Reclaims(ctx, pos[0])
			if err != nil {
				return err
			}
			return g.emit(rs, reclaimTable(rs...))
		})
	cmd.Subcommands = []*ffcli.Command{step(true), step(false)}
	return cmd
}

func reclaimTable(rs ...client.Reclaim) func(w *tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "ID", "STATE", "FROM", "TO", "AMOUNT", "DRY RUN", "WARNED", "UPDATED", "REASON")
		for _, r := range rs {
			row(w, r.ID, r.State, r.FromLine, r.ToLine, display.Grouped(r.Amount), r.DryRun, msTime(r.WarnedAtMs),
				msTime(r.UpdatedAtMs), orDash(oneLine(r.Reason)))
		}
	}
}

func (g *globals) eventsCmd() *ffcli.Command {
	var limit int
	return g.cmd("events", "quota-center admin events <resource> [--limit N]",
		"the pool event stream: the controller's and operators' decisions, newest first",
		func(fs *flag.FlagSet) { fs.Var(positiveInt{&limit}, "limit", "`N` events, 1–500 (default 100)") },
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			evs, err := c.PoolEvents(ctx, pos[0], limit)
			if err != nil {
				return err
			}
			return g.emit(evs, func(w *tabwriter.Writer) {
				row(w, "ID", "AT", "KIND", "LINE", "TO", "AMOUNT", "REASON")
				for _, e := range evs {
					row(w, e.ID, msTime(e.AtMs), e.Kind, orDash(e.BusinessLine), orDash(e.ToLine), display.Grouped(e.Amount), orDash(oneLine(e.Reason)))
				}
			})
		})
}

func (g *globals) reconcileCmd() *ffcli.Command {
	return g.cmd("reconcile", "quota-center admin reconcile [<resource>]",
		"reconcile Redis with the ledger now: one resource, or every one", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if len(pos) > 1 {
				return fmt.Errorf("want at most 1 argument: the resource; got %d", len(pos))
			}
			res := ""
			if len(pos) == 1 {
				res = pos[0]
			}
			reps, err := c.Reconcile(ctx, res)
			if err != nil {
				return err
			}
			return g.emit(reps, func(w *tabwriter.Writer) {
				row(w, "RESOURCE", "PERIOD START", "DRIFT CHARGED", "DRIFT RESERVED", "ORPHANS", "SETTLED", "RESTORED", "BALANCE FIXED", "SKIPPED")
				for _, r := range reps {
					row(w, r.Resource, ts(r.PeriodStart), display.Grouped(r.DriftCharged), display.Grouped(r.DriftReserved),
						r.OrphansReleased, r.LedgerRowsSettled, r.SessionsRestored, r.BalanceAdjusted, orDash(r.Skipped))
				}
			})
		})
}
