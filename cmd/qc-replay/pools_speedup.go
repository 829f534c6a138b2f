package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// speedReport is `--url … --speedup S` in the JSON report: the same
// workload through the service on a clock S times faster, and the
// reference model on the same settings, with the largest difference of
// the percentages between the two.
type speedReport struct {
	Speedup    float64      `json:"speedup"`
	Elasticity string       `json:"elasticity"` // the live run's: OFF (no controller), see runPools
	Server     schemeReport `json:"server"`
	Model      schemeReport `json:"model"`
	// MaxDifferencePp: the largest |server − model| over utilisation,
	// burst refused, refused and EXPLORE's non-critical share (points).
	MaxDifferencePp float64 `json:"maxDifferencePp"`
}

// liveCounts is what the timed live run counts, as pools.Result does.
type liveCounts struct {
	mu  sync.Mutex
	res pools.Result
	err int
	run string       // this run's part of its session ids: a rerun on the same resource is not a replay
	ids atomic.Int64 // the session ids this run chose
}

// liveRetryBackoff is the wait before a live call's first retry; it doubles
// each retry, up to maxRetries retries.
const liveRetryBackoff = 50 * time.Millisecond

// doRetried is c.do retried as a service's client would: a transport error
// or a 503 (a backend unavailable, or a period that rolled over under the
// call at this speed-up) is tried again with the same body, so with the
// same session id: the service answers a retried apply or finish as the
// first (its idempotency key), never granting or charging twice.
func doRetried(ctx context.Context, c *liveClient, path string, body map[string]any) (int, map[string]any, error) {
	for attempt := 0; ; attempt++ {
		code, m, err := c.do("POST", path, body, false)
		if (err == nil && code != 503) || attempt >= maxRetries || ctx.Err() != nil {
			return code, m, err
		}
		t := time.NewTimer(liveRetryBackoff << attempt)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return code, m, err
		}
	}
}

// runLiveTimed replays w through the service at speedup: the policy resets
// every period / speedup (a whole number of seconds), request i is applied
// at the second period's start + AtMs / speedup (the first period is the
// set-up's) and finished DurationMs / speedup after its grant. It returns
// the counts as a pools.Result over periods periods of cfg.Limit, with the
// model's ceiling (the service's periods are the model's, shifted by one).
func runLiveTimed(ctx context.Context, cfg liveConfig, w pools.Workload, speedup float64, model pools.Result) (pools.Result, error) {
	every := time.Duration(float64(cfg.Period) / speedup)
	if every < time.Second || every%time.Second != 0 {
		return pools.Result{}, fmt.Errorf("--speedup: the period / %g = %s is not a whole number of seconds", speedup, every)
	}
	c := newLiveClient(ctx, cfg)
	if err := c.setup(w, every); err != nil {
		return pools.Result{}, err
	}
	code, pol, err := c.do("GET", "/admin/policies/"+cfg.Resource, nil, true)
	if err != nil || code != 200 {
		return pools.Result{}, fmt.Errorf("GET the policy: %d %v %w", code, pol, err)
	}
	created, err := time.Parse(time.RFC3339Nano, fmt.Sprint(pol["createdAt"]))
	if err != nil {
		return pools.Result{}, fmt.Errorf("the policy's createdAt %v: %w", pol["createdAt"], err)
	}
	start := created.Add(every)
	tiers := map[string]pools.Tier{}
	for _, l := range w.Lines {
		tiers[l.Name] = l.Tier
	}
	lc := &liveCounts{res: pools.Result{Scheme: "server", RefusedByReason: map[pools.Reason]int{}},
		run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	var wg sync.WaitGroup
	scale := func(ms int64) time.Duration { return time.Duration(float64(ms) * float64(time.Millisecond) / speedup) }
	for _, r := range w.Requests {
		if d := time.Until(start.Add(scale(r.AtMs))); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc.one(ctx, c, r, tiers[r.Line], scale(r.DurationMs))
		}()
	}
	wg.Wait()
	res := lc.res
	res.Periods, res.Ceiling = model.Periods, model.Ceiling
	res.QuotaOffered = cfg.Limit * int64(model.Periods)
	if lc.err > 0 {
		return res, fmt.Errorf("%d calls failed other than with 429", lc.err)
	}
	return res, ctx.Err()
}

// one applies r, counts the answer, and finishes a grant after hold.
func (lc *liveCounts) one(ctx context.Context, c *liveClient, r pools.Request, tier pools.Tier, hold time.Duration) {
	sid := fmt.Sprintf("live-%s-%d", lc.run, lc.ids.Add(1))
	code, m, err := doRetried(ctx, c, "/quota/apply", map[string]any{"resourceName": c.cfg.Resource, "applyAmount": r.Amount,
		"sessionId": sid, "businessLine": r.Line, "critical": r.Critical, "continuation": r.Continuation})
	lc.mu.Lock()
	res := &lc.res
	res.Requests++
	if r.Burst {
		res.BurstRequests++
	}
	switch {
	case err != nil || (code != 200 && code != 429):
		lc.err++
	case code == 429:
		reason, _ := m["reason"].(string)
		res.Refused++
		res.RefusedByReason[pools.Reason(reason)]++
		if r.Burst {
			res.BurstRefused++
		}
		if tier == pools.TierCore {
			res.CoreRefused++
			if r.Critical {
				res.CoreCritRefused++
			}
		}
		if tier == pools.TierExplore {
			res.ExploreRefused++
			if !r.Critical {
				res.ExploreRefusedNonCritical++
			}
		}
	}
	lc.mu.Unlock()
	if code != 200 || err != nil {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(hold):
	}
	code, _, err = doRetried(ctx, c, "/quota/finish", map[string]any{"resourceName": c.cfg.Resource, "sessionId": sid,
		"actualUsedAmount": r.Actual})
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if err != nil || code != 200 {
		lc.err++
		return
	}
	lc.res.Charged += r.Actual
}

// newSpeedReport compares the server's figures with the model's.
func newSpeedReport(speedup float64, server, model pools.Result) *speedReport {
	s, m := newSchemeReport(server), newSchemeReport(model)
	s.IdlePercent, s.LineUtilisationMinPercent, s.LineUtilisationMaxPercent = 0, 0, 0 // not seen from outside
	d := 0.0
	for _, x := range [][2]float64{{s.UtilisationPercent, m.UtilisationPercent}, {s.BurstRefusedPercent, m.BurstRefusedPercent},
		{s.RefusedPercent, m.RefusedPercent}, {s.ExploreRefusalsNonCriticalPercent, m.ExploreRefusalsNonCriticalPercent}} {
		d = math.Max(d, math.Abs(x[0]-x[1]))
	}
	return &speedReport{Speedup: speedup, Elasticity: string(pools.ElasticityOff), Server: s, Model: m, MaxDifferencePp: d}
}
