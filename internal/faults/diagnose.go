package faults

// What Verify reads besides the ledger rows: the service's metrics, status,
// the Redis state of a resource and the periods before the current one, for
// the checks' details and diagnoses.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// metricSums summarises the service's repair and breaker counters.
func (e *Env) metricSums(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	sums := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, labels, value, ok := parseMetric(line)
		if !ok {
			continue
		}
		switch name {
		case "quota_reconcile_repairs_total":
			sums["reconcile "+labels["kind"]] += value
		case "quota_circuit_breaker_transitions_total":
			if labels["to"] == "open" {
				sums["breaker "+labels["backend"]+" opened"] += value
			}
		case "quota_sessions_leaked_total":
			sums["sessions swept as LEAKED"] += value
		case "quota_sweep_errors_total":
			sums["sweep errors"] += value
		}
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, sums[k]))
	}
	return strings.Join(parts, ", "), nil
}

// parseMetric reads one line of the Prometheus text format.
func parseMetric(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	head := line[:sp]
	labels = map[string]string{}
	if i := strings.IndexByte(head, '{'); i >= 0 {
		name = head[:i]
		for _, kv := range strings.Split(strings.TrimSuffix(head[i+1:], "}"), ",") {
			k, val, found := strings.Cut(kv, "=")
			if found {
				labels[k] = strings.Trim(val, `"`)
			}
		}
	} else {
		name = head
	}
	return name, labels, v, true
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") }

type statusNums struct {
	used, reserved, period int64
}

// status reads GET /quota/status (as a client: no token needed).
func (e *Env) status(ctx context.Context, name string) (statusNums, error) {
	var out struct {
		Used        int64  `json:"usedAmount"`
		Reserved    int64  `json:"reservedAmount"`
		PeriodStart string `json:"periodStart"`
	}
	if err := e.Admin(ctx, http.MethodGet, "/quota/status?resourceName="+name, nil, &out); err != nil {
		return statusNums{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, out.PeriodStart)
	if err != nil {
		return statusNums{}, fmt.Errorf("status %s: periodStart %q: %w", name, out.PeriodStart, err)
	}
	return statusNums{used: out.Used, reserved: out.Reserved, period: t.UnixMilli()}, nil
}

// lockDiagnosis records, once a reconcile lock has kept passes out for
// 10s, the lock's value and TTL and a dump of every goroutine of this
// process (quota-center runs in it): is a pass stuck, or was the lock left?
func (e *Env) lockDiagnosis(ctx context.Context, resource string) {
	rc := e.Redis.Client()
	defer rc.Close()
	key := "qc:{" + resource + "}:lock:reconcile"
	v, _ := rc.Get(ctx, key).Result()
	ttl, _ := rc.PTTL(ctx, key).Result()
	path := filepath.Join(e.dir, "goroutines-"+resource+".txt")
	if f, err := os.Create(path); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		_ = f.Close()
	}
	e.lockNote = fmt.Sprintf("%s: lock %s = %q, ttl %s; goroutines in %s", resource, key, v, ttl.Round(time.Millisecond), path)
	e.logf.printf("faults: reconcile locked out: %s", e.lockNote)
}

// openLeft describes sessions still open ("" = none); with detail, the
// Redis state of a few of them and of the resource's locks.
func (e *Env) openLeft(ctx context.Context, resources []Resource, detail bool) (string, error) {
	rc := e.Redis.Client()
	defer rc.Close()
	var parts []string
	for _, r := range resources {
		p := "qc:{" + r.Name + "}:"
		leases, err := rc.ZCard(ctx, p+"leases").Result()
		if err != nil {
			return "", err
		}
		leaked, err := rc.SCard(ctx, p+"leaked").Result()
		if err != nil {
			return "", err
		}
		var using int64
		if err := e.Ledger.QueryRowContext(ctx,
			"SELECT COUNT(*) FROM quota_usage WHERE resource_name = ? AND status = 'USING'", r.Name).Scan(&using); err != nil {
			return "", err
		}
		if leases+leaked+using == 0 {
			continue
		}
		line := fmt.Sprintf("%s: %d ledger rows USING, %d leases in Redis, %d unacknowledged leaks", r.Name, using, leases, leaked)
		if detail {
			line += e.redisState(ctx, rc, r.Name)
		}
		parts = append(parts, line)
	}
	return strings.Join(parts, "; "), nil
}

// redisState shows, for diagnosis, the Redis side of a resource's open
// sessions (ledger USING rows and lease entries) and its locks.
func (e *Env) redisState(ctx context.Context, rc *redis.Client, resource string) string {
	p := "qc:{" + resource + "}:"
	var b strings.Builder
	if t, err := rc.Time(ctx).Result(); err == nil {
		fmt.Fprintf(&b, " [Redis now %d]", t.UnixMilli())
	}
	ids := map[string]bool{}
	rows, err := e.Ledger.QueryContext(ctx, "SELECT session_id FROM quota_usage WHERE resource_name = ? AND status = 'USING' LIMIT 3", resource)
	if err == nil {
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				ids[id] = true
			}
		}
		_ = rows.Close()
	}
	if zs, err := rc.ZRangeWithScores(ctx, p+"leases", 0, 2).Result(); err == nil {
		for _, z := range zs {
			ids[fmt.Sprint(z.Member)] = true
		}
	}
	for id := range ids {
		h, _ := rc.HGetAll(ctx, p+"s:"+id).Result()
		score, serr := rc.ZScore(ctx, p+"leases", id).Result()
		lease := "none"
		if serr == nil {
			lease = strconv.FormatFloat(score, 'f', 0, 64)
		}
		fmt.Fprintf(&b, " [session %s: hash %v, lease score %s]", id, h, lease)
	}
	if keys, err := rc.Keys(ctx, p+"lock:*").Result(); err == nil {
		for _, k := range keys {
			ttl, _ := rc.PTTL(ctx, k).Result()
			fmt.Fprintf(&b, " [lock %s ttl %s]", k, ttl)
		}
	}
	return b.String()
}

type olderResult struct {
	compared int
	bad      []string
}

// olderPeriods compares every period balance left in Redis, other than the
// current one, with the ledger.
func (e *Env) olderPeriods(ctx context.Context, resources []Resource, periods map[string]map[int64]*periodTotals) (olderResult, error) {
	var res olderResult
	rc := e.Redis.Client()
	defer rc.Close()
	for _, r := range resources {
		st, err := e.status(ctx, r.Name)
		if err != nil {
			return res, err
		}
		keys, err := rc.Keys(ctx, "qc:{"+r.Name+"}:b:*").Result()
		if err != nil {
			return res, err
		}
		sort.Strings(keys)
		for _, k := range keys {
			per, err := strconv.ParseInt(k[strings.LastIndexByte(k, ':')+1:], 10, 64)
			if err != nil || per == st.period {
				continue
			}
			v, err := rc.HMGet(ctx, k, "charged", "reserved").Result()
			if err != nil {
				return res, err
			}
			c, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
			rv, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
			t := periods[r.Name][per]
			if t == nil {
				t = &periodTotals{}
			}
			res.compared++
			if c != t.charged || rv != t.reserved {
				res.bad = append(res.bad, fmt.Sprintf("%s period %s: Redis charged %d reserved %d, ledger charged %d reserved %d",
					r.Name, msTime(per), c, rv, t.charged, t.reserved))
			}
		}
	}
	return res, nil
}
