package admincli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/quotacenter/quota-center/api/client"
)

// auditEntry is one entry of GET /admin/audit.
type auditEntry struct {
	ID       int64           `json:"id"`
	At       time.Time       `json:"at"`
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	Resource string          `json:"resource"`
	Reason   string          `json:"reason"`
	Before   json.RawMessage `json:"before"`
	After    json.RawMessage `json:"after"`
}

// readAudit reads one page of the audit log with the client's base URL and
// token. (The Go client gains its own Audit call with the SDK work; this
// command moves onto it then.)
func (g *globals) readAudit(ctx context.Context, c *client.Client, f client.AuditQuery) ([]auditEntry, error) {
	resource, limit, before := f.Resource, f.Limit, f.Before
	q := url.Values{}
	if resource != "" {
		q.Set("resourceName", resource)
	}
	if f.Actor != "" {
		q.Set("actor", f.Actor)
	}
	if f.Action != "" {
		q.Set("action", f.Action)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL()+"/admin/audit?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Code    string       `json:"code"`
		Message string       `json:"message"`
		Entries []auditEntry `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET /admin/audit: %d, undecodable answer: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("quota-center: %d %s: %s", resp.StatusCode, body.Code, body.Message)
	}
	return body.Entries, nil
}

func (g *globals) auditCmd() *ffcli.Command {
	var f client.AuditQuery
	return g.cmd("audit", "quota-center admin audit [--resource R] [--actor A] [--action X] [--limit N] [--before ID]",
		"the audit log of admin changes, newest first",
		func(fs *flag.FlagSet) {
			fs.StringVar(&f.Resource, "resource", "", "only this resource")
			fs.StringVar(&f.Actor, "actor", "", "only changes by this admin token name")
			fs.StringVar(&f.Action, "action", "", "only this action, e.g. policy.put, grant.void, reclaim.confirm")
			fs.Var(positiveInt{&f.Limit}, "limit", "`N` entries, 1–500 (default 100)")
			fs.Int64Var(&f.Before, "before", 0, "only entries older than this id (the next page)")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			if err := want(pos, 0, "none (use --resource)"); err != nil {
				return err
			}
			es, err := g.readAudit(ctx, c, f)
			if err != nil {
				return err
			}
			return g.emit(es, func(w *tabwriter.Writer) {
				row(w, "ID", "AT", "ACTOR", "ACTION", "RESOURCE", "REASON")
				for _, e := range es {
					row(w, e.ID, ts(e.At), e.Actor, e.Action, e.Resource, orDash(oneLine(e.Reason)))
				}
			})
		})
}
