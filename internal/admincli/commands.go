package admincli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/display"
	"github.com/quotacenter/quota-center/internal/quota"
)

// unitOf is the unit name of a quota type, as display wants it.
func unitOf(t client.QuotaType) string { return quota.QuotaType(t).Unit() }

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func tsp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ts(*t)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (g *globals) policyTable(ps ...client.Policy) func(w *tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "RESOURCE", "TYPE", "LIMIT", "RESET", "TIMEZONE", "LEAK THRESHOLD", "FAIL MODE", "UPDATED")
		for _, p := range ps {
			row(w, p.ResourceName, p.QuotaType, display.Amount(unitOf(p.QuotaType), p.TotalLimit), orDash(p.ResetCron),
				p.Timezone, display.Clock(p.LeakThresholdSeconds), p.FailMode, ts(p.UpdatedAt))
		}
	}
}

// exec wraps a command body: parse its flags and positionals, build the
// client, run.
func (g *globals) cmd(name, usage, help string, setup func(fs *flag.FlagSet), run func(ctx context.Context, c *client.Client, pos []string) error) *ffcli.Command {
	fs := g.newFlags(name)
	if setup != nil {
		setup(fs)
	}
	return &ffcli.Command{
		Name: name, ShortUsage: usage, ShortHelp: help, FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := positionals(fs, args)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return run(ctx, c, pos)
		},
	}
}

// want checks the number of positional arguments.
func want(pos []string, n int, what string) error {
	if len(pos) != n {
		return fmt.Errorf("want %d argument(s): %s; got %d", n, what, len(pos))
	}
	return nil
}

func (g *globals) policiesCmd() *ffcli.Command {
	var spec client.PolicySpec
	var force bool
	var reason string
	set := g.cmd("set", "quota-center admin policies set <resource> --type T --limit N [--cron C] [--timezone Z] [--leak-threshold S] [--fail-mode M]",
		"create or replace a policy (PUT: fields left out take their defaults)",
		func(fs *flag.FlagSet) {
			fs.Func("type", "DURATION, COUNT, TOKENS or BANDWIDTH", func(v string) error { spec.QuotaType = client.QuotaType(v); return nil })
			fs.Int64Var(&spec.TotalLimit, "limit", 0, "limit per period, in the type's unit")
			fs.StringVar(&spec.ResetCron, "cron", "", `reset schedule, e.g. "0 0 * * *" ("" = never resets)`)
			fs.StringVar(&spec.Timezone, "timezone", "", "IANA zone of the schedule (default UTC)")
			fs.Int64Var(&spec.LeakThresholdSeconds, "leak-threshold", 0, "seconds without a heartbeat before a session leaks (default 300)")
			fs.StringVar(&spec.FailMode, "fail-mode", "", "CLOSED (default) or OPEN")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			spec.ResourceName = pos[0]
			p, err := c.PutPolicy(ctx, spec)
			if err != nil {
				return err
			}
			return g.emit(p, g.policyTable(*p))
		})
	patch := g.cmd("patch", `quota-center admin policies patch <resource> '{"totalLimit":21600}' [--force] [--reason R]`,
		"change some fields of a policy (JSON merge patch; null restores a default)",
		func(fs *flag.FlagSet) {
			fs.BoolVar(&force, "force", false, "change quotaType even while the period has usage")
			fs.StringVar(&reason, "reason", "", "why, for the audit log")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 2, "the resource and the JSON patch"); err != nil {
				return err
			}
			if !json.Valid([]byte(pos[1])) {
				return fmt.Errorf("the patch is not valid JSON: %s", pos[1])
			}
			p, err := c.PatchPolicy(ctx, pos[0], json.RawMessage(pos[1]), client.PatchOptions{Force: force, Reason: reason})
			if err != nil {
				return err
			}
			return g.emit(p, g.policyTable(*p))
		})
	var delReason string
	del := g.cmd("delete", "quota-center admin policies delete <resource> [--reason R]",
		"delete a policy (refused while it has live sessions)",
		func(fs *flag.FlagSet) { fs.StringVar(&delReason, "reason", "", "why, for the audit log") },
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			p, err := c.DeletePolicy(ctx, pos[0], delReason)
			if err != nil {
				return err
			}
			return g.emit(map[string]any{"deleted": p}, func(w *tabwriter.Writer) { row(w, "deleted", p.ResourceName) })
		})
	list := g.cmd("list", "quota-center admin policies list", "list every policy", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 0, "none"); err != nil {
				return err
			}
			ps, err := c.ListPolicies(ctx)
			if err != nil {
				return err
			}
			return g.emit(ps, g.policyTable(ps...))
		})
	get := g.cmd("get", "quota-center admin policies get <resource>", "show one policy", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			p, err := c.GetPolicy(ctx, pos[0])
			if err != nil {
				return err
			}
			return g.emit(p, g.policyTable(*p))
		})
	return &ffcli.Command{
		Name: "policies", ShortUsage: "quota-center admin policies <list|get|set|patch|delete> …", ShortHelp: "read and change policies",
		FlagSet: g.newFlags("policies"), Subcommands: []*ffcli.Command{list, get, set, patch, del},
		Exec: helpOrUnknown,
	}
}

func (g *globals) statusCmd() *ffcli.Command {
	return g.cmd("status", "quota-center admin status <resource> [<resource>…]",
		"the current period: limit, used, reserved, remaining, burn rate and when it runs out", nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			if len(pos) == 0 {
				return fmt.Errorf("want at least one resource")
			}
			var all []*client.QuotaStatus
			for _, r := range pos {
				st, err := c.Status(ctx, r)
				if err != nil {
					return err
				}
				all = append(all, st)
			}
			now := time.Now()
			return g.emit(all, func(w *tabwriter.Writer) {
				row(w, "RESOURCE", "LIMIT", "USED", "RESERVED", "REMAINING", "ACTIVE", "BURN RATE", "EXHAUSTS IN", "NEXT RESET")
				for _, st := range all {
					u := unitOf(st.QuotaType)
					row(w, st.ResourceName, display.Amount(u, st.TotalLimit), display.Amount(u, st.UsedAmount),
						display.Amount(u, st.ReservedAmount), display.Amount(u, st.RemainingQuota), st.ActiveSessions,
						display.Rate(u, st.BurnRate), display.Until(now, st.ExhaustsAt), tsp(st.NextResetAt))
				}
			})
		})
}

func (g *globals) sessionsCmd() *ffcli.Command {
	var q client.SessionQuery
	var all bool
	return g.cmd("sessions", "quota-center admin sessions <resource> [--client C] [--line L] [--status USING|FINISHED|LEAKED] [--limit N] [--all]",
		"the session map: live sessions (newest lease first), then finished and leaked ones",
		func(fs *flag.FlagSet) {
			fs.StringVar(&q.ClientID, "client", "", "only this client")
			fs.StringVar(&q.BusinessLine, "line", "", "only this business line")
			fs.StringVar(&q.Status, "status", "", "only USING, FINISHED or LEAKED")
			fs.Var(positiveInt{&q.Limit}, "limit", "`N` sessions per page, 1–1000 (default 100)")
			fs.StringVar(&q.Cursor, "cursor", "", "start at this page (the next cursor printed by a previous call)")
			fs.BoolVar(&all, "all", false, "follow the cursors to the last page")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			q.ResourceName = pos[0]
			pol, err := c.GetPolicy(ctx, q.ResourceName)
			if err != nil {
				return err
			}
			var sessions []client.SessionInfo
			next := ""
			for pages := 0; ; pages++ {
				p, err := c.Sessions(ctx, q)
				if err != nil {
					return err
				}
				sessions = append(sessions, p.Sessions...)
				next = p.NextCursor
				if !all || next == "" || pages > 10000 {
					break
				}
				q.Cursor = next
			}
			u := unitOf(pol.QuotaType)
			out := map[string]any{"sessions": sessions, "nextCursor": next}
			return g.emit(out, func(w *tabwriter.Writer) {
				row(w, "SESSION", "CLIENT", "LINE", "STATUS", "GRANTED", "CHARGED", "STARTED", "LAST HEARTBEAT", "LEASE EXPIRES", "AGE")
				for _, s := range sessions {
					charged := "-"
					if s.Status != "USING" {
						charged = display.Amount(u, s.ChargedAmount)
					}
					row(w, s.SessionID, orDash(s.ClientID), orDash(s.BusinessLine), s.Status, display.Amount(u, s.GrantedAmount), charged,
						ts(s.StartTime), tsp(s.LastHeartbeat), tsp(s.LeaseExpiresAt), display.Clock(int64(s.AgeSeconds)))
				}
				if next != "" {
					fmt.Fprintf(w, "\nmore: --cursor %s\n", next)
				}
			})
		})
}

func (g *globals) usageCmd() *ffcli.Command {
	var q client.UsageQuery
	var from, to string
	return g.cmd("usage", "quota-center admin usage <resource> [--by client|line|hour|day] [--from T] [--to T]",
		"usage history from the ledger (sessions started in [from, to), UTC)",
		func(fs *flag.FlagSet) {
			fs.StringVar(&q.GroupBy, "by", "hour", "client, line (business line), hour or day")
			fs.StringVar(&from, "from", "", "RFC 3339 start (default: 24 h before --to)")
			fs.StringVar(&to, "to", "", "RFC 3339 end, exclusive (default: now)")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			q.ResourceName = pos[0]
			var err error
			for _, p := range []struct {
				v   string
				dst *time.Time
				n   string
			}{{from, &q.From, "--from"}, {to, &q.To, "--to"}} {
				if p.v != "" {
					if *p.dst, err = time.Parse(time.RFC3339, p.v); err != nil {
						return fmt.Errorf("%s: want an RFC 3339 time such as 2025-06-01T00:00:00Z", p.n)
					}
				}
			}
			rep, err := c.Usage(ctx, q)
			if err != nil {
				return err
			}
			u := rep.Unit
			return g.emit(rep, func(w *tabwriter.Writer) {
				key := "HOUR"
				switch rep.GroupBy {
				case "client":
					key = "CLIENT"
				case "line":
					key = "LINE"
				case "day":
					key = "DAY"
				}
				row(w, key, "SESSIONS", "OPEN", "LEAKED", "GRANTED", "CHARGED", "RESERVED", "REFUNDED", "OVERAGE")
				for _, gr := range rep.Groups {
					k := gr.ClientID + gr.BusinessLine // one of the two, by the grouping
					if gr.Start != nil {
						k = ts(*gr.Start)
					}
					row(w, orDash(k), gr.Sessions, gr.OpenSessions, gr.LeakedSessions, display.Amount(u, gr.GrantedAmount),
						display.Amount(u, gr.ChargedAmount), display.Amount(u, gr.ReservedAmount),
						display.Amount(u, gr.RefundedAmount), display.Amount(u, gr.OverageAmount))
				}
				if rep.Truncated {
					fmt.Fprintln(w, "\n(truncated: more groups than shown; narrow the range)")
				}
			})
		})
}

func (g *globals) resetCmd() *ffcli.Command {
	var reason string
	return g.cmd("reset", "quota-center admin reset <resource> [--reason R]",
		"start a new period now (sessions in flight settle into their own period)",
		func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why, for the audit log") },
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			r, err := c.ResetPeriod(ctx, pos[0], reason)
			if err != nil {
				return err
			}
			return g.emit(r, func(w *tabwriter.Writer) {
				row(w, "RESOURCE", "PREVIOUS PERIOD START", "NEW PERIOD START", "NEXT RESET")
				row(w, r.ResourceName, ts(r.PreviousPeriod.PeriodStart), ts(r.PeriodStart), tsp(r.NextResetAt))
			})
		})
}

func (g *globals) finishCmd() *ffcli.Command {
	var req client.ForceFinishRequest
	var amount string
	return g.cmd("finish", "quota-center admin finish <sessionId> [--client C] [--amount N] [--resource R] [--reason R]",
		"finish a session on its client's behalf (default amount: the grant)",
		func(fs *flag.FlagSet) {
			fs.StringVar(&amount, "amount", "", "usage to charge, in the policy's unit (default: the grant)")
			fs.StringVar(&req.ResourceName, "resource", "", "check that the session is this resource's")
			fs.StringVar(&req.ClientID, "client", "", "the session's client (session ids are scoped to it; empty: a session applied without one)")
			fs.StringVar(&req.Reason, "reason", "", "why, for the audit log")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the session id"); err != nil {
				return err
			}
			if amount != "" {
				n, err := strconv.ParseInt(amount, 10, 64)
				if err != nil {
					return fmt.Errorf("--amount: want a whole number, got %q", amount)
				}
				req.Amount = &n
			}
			r, err := c.ForceFinish(ctx, pos[0], req)
			if err != nil {
				return err
			}
			return g.emit(r, func(w *tabwriter.Writer) {
				row(w, "SESSION", "RESOURCE", "CLIENT", "GRANTED", "CHARGED", "REFUNDED", "OVERAGE", "REMAINING")
				u := unitOf(r.QuotaType)
				row(w, r.SessionID, r.ResourceName, orDash(r.ClientID), display.Amount(u, r.GrantedAmount), display.Amount(u, r.ChargedAmount),
					display.Amount(u, r.RefundedAmount), display.Amount(u, r.OverageAmount), display.Amount(u, r.RemainingQuota))
			})
		})
}

// grantCmd is `grant` (release false) or `release` (release true).
func (g *globals) grantCmd(release bool) *ffcli.Command {
	var req client.GrantRequest
	var until string
	name, usage, help := "grant", "quota-center admin grant <resource> --amount N --until T [--line L] [--reason R]",
		"add temporary quota until a time"
	if release {
		name, usage, help = "release", "quota-center admin release <resource> --amount N [--until T] [--line L] [--reason R]",
			"release reserve from the buffer pool"
	}
	var flags *flag.FlagSet
	return g.cmd(name, usage, help,
		func(fs *flag.FlagSet) {
			flags = fs
			fs.Int64Var(&req.Amount, "amount", 0, "amount, in the policy's unit (required)")
			fs.StringVar(&until, "until", "", "RFC 3339 end, e.g. 2025-06-01T18:00:00Z (required for a grant)")
			fs.StringVar(&req.BusinessLine, "line", "", "business line (default: every line, or the shared pool)")
			fs.StringVar(&req.Reason, "reason", "", "why, for the record")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 1, "the resource"); err != nil {
				return err
			}
			// The flags are checked here, by their names, before the API
			// would refuse them by its fields' (amount, expiresAt).
			given := map[string]bool{}
			flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
			if !given["amount"] {
				return errors.New("--amount is required (a whole number, in the policy's unit)")
			}
			if !release && until == "" {
				return errors.New("--until is required for a grant (an RFC 3339 time such as 2025-06-01T18:00:00Z)")
			}
			if until != "" {
				t, err := time.Parse(time.RFC3339, until)
				if err != nil {
					return fmt.Errorf("--until: want an RFC 3339 time such as 2025-06-01T18:00:00Z")
				}
				req.ExpiresAt = &t
			}
			call := c.GrantQuota
			if release {
				call = c.ReleaseReserve
			}
			r, err := call(ctx, pos[0], req)
			if err != nil {
				return err
			}
			return g.emit(r, func(w *tabwriter.Writer) {
				row(w, "ID", "KIND", "AMOUNT", "LINE", "FROM", "UNTIL", "REASON")
				row(w, r.ID, r.Kind, display.Grouped(r.Amount), orDash(r.BusinessLine), r.EffectiveAt, orDash(r.ExpiresAt), orDash(r.Reason))
			})
		})
}
