package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// liveConfig is `qc-replay pools --url`: the workload's first requests
// replayed against a running service.
type liveConfig struct {
	URL, Resource, AdminToken, APIKey string
	Limit                             int64
	Period                            time.Duration // the policy resets every Period ("@every")
	Settings                          pools.Settings
	Concurrency                       int
}

// liveResult counts what the service answered.
type liveResult struct {
	Requests, Granted, Refused, Errors int
	ByReason                           map[string]int
	CoreRefused, CoreCritRefused       int
	Charged                            int64
}

// liveClient calls a running service for the live runs.
type liveClient struct {
	ctx context.Context
	cfg liveConfig
	hc  *http.Client
}

func newLiveClient(ctx context.Context, cfg liveConfig) *liveClient {
	return &liveClient{ctx: ctx, cfg: cfg, hc: &http.Client{Timeout: 10 * time.Second}}
}

// do sends body as JSON and decodes the JSON answer.
func (c *liveClient) do(method, path string, body any, admin bool) (int, map[string]any, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(c.ctx, method, c.cfg.URL+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if admin && c.cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.AdminToken)
	}
	if !admin && c.cfg.APIKey != "" {
		req.Header.Set("X-API-Key", c.cfg.APIKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, nil
}

// setup creates the policy (resetting every `every`), the pool settings
// and w's lines.
func (c *liveClient) setup(w pools.Workload, every time.Duration) error {
	r := c.cfg.Resource
	setup := []struct {
		method, path string
		body         any
	}{
		{"PUT", "/admin/policies/" + r, map[string]any{"quotaType": "TOKENS", "totalLimit": c.cfg.Limit, "resetCron": "@every " + every.String()}},
		{"PUT", "/admin/policies/" + r + "/pools", c.cfg.Settings},
	}
	for _, l := range w.Lines {
		setup = append(setup, struct {
			method, path string
			body         any
		}{"PUT", "/admin/policies/" + r + "/lines/" + l.Name, map[string]any{"tier": l.Tier, "weight": l.Weight}})
	}
	for _, s := range setup {
		code, m, err := c.do(s.method, s.path, s.body, true)
		if err != nil {
			return fmt.Errorf("%s %s: %w", s.method, s.path, err)
		}
		if code >= 300 {
			return fmt.Errorf("%s %s: %d %v", s.method, s.path, code, m)
		}
	}
	return nil
}

// runLive sets up the resource (policy, pool settings, lines) and replays
// w's requests through POST /quota/apply and /quota/finish with
// businessLine, critical and continuation, at full speed with
// cfg.Concurrency workers (the controller's timing is the service's own).
func runLive(ctx context.Context, cfg liveConfig, w pools.Workload, out io.Writer) (liveResult, error) {
	c := newLiveClient(ctx, cfg)
	do := c.do
	if err := c.setup(w, cfg.Period); err != nil {
		return liveResult{}, err
	}
	tiers := map[string]pools.Tier{}
	for _, l := range w.Lines {
		tiers[l.Name] = l.Tier
	}
	res := liveResult{ByReason: map[string]int{}}
	var mu sync.Mutex
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range max(1, cfg.Concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				r := w.Requests[i]
				code, m, err := do("POST", "/quota/apply", map[string]any{"resourceName": cfg.Resource, "applyAmount": r.Amount,
					"businessLine": r.Line, "critical": r.Critical, "continuation": r.Continuation}, false)
				mu.Lock()
				res.Requests++
				switch {
				case err != nil || (code != 200 && code != 429):
					res.Errors++
				case code == 429:
					res.Refused++
					reason, _ := m["reason"].(string)
					res.ByReason[reason]++
					if tiers[r.Line] == pools.TierCore {
						res.CoreRefused++
						if r.Critical {
							res.CoreCritRefused++
						}
					}
				default:
					res.Granted++
				}
				mu.Unlock()
				if code != 200 {
					continue
				}
				sid, _ := m["sessionId"].(string)
				code, _, err = do("POST", "/quota/finish", map[string]any{"resourceName": cfg.Resource, "sessionId": sid,
					"actualUsedAmount": r.Actual}, false)
				mu.Lock()
				if err != nil || code != 200 {
					res.Errors++
				} else {
					res.Charged += r.Actual
				}
				mu.Unlock()
			}
		}()
	}
	for i := range w.Requests {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	fmt.Fprintf(out, "live %s: %d applies, %d granted, %d refused %v (CORE %d, critical %d), %d errors, %s tokens charged of limit %s\n",
		cfg.URL, res.Requests, res.Granted, res.Refused, res.ByReason, res.CoreRefused, res.CoreCritRefused, res.Errors,
		strconv.FormatInt(res.Charged, 10), strconv.FormatInt(cfg.Limit, 10))
	if res.Errors > 0 {
		return res, fmt.Errorf("%d calls failed other than with 429", res.Errors)
	}
	return res, nil
}
