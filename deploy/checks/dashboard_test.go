package checks

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the quota-center repository (this module is deploy/checks).
const repoRoot = "../.."

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadDashboard(t *testing.T) (Dashboard, map[string]any) {
	t.Helper()
	b := readFile(t, "deploy/grafana/quota-center.json")
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	return d, raw
}

func TestDashboardIsCleanUnderStrictLinterRules(t *testing.T) {
	d, _ := loadDashboard(t)
	for _, f := range Lint(d) {
		t.Error(f)
	}
}

// Each rule finds what it is for: a copy of the dashboard with one fault
// at a time.
func TestDashboardLinterRulesCatchFaults(t *testing.T) {
	cases := []struct {
		rule   string
		inject func(d *Dashboard)
	}{
		{"uneditable-dashboard", func(d *Dashboard) { d.Editable = true }},
		{"target-job-rule", func(d *Dashboard) {
			p := firstPromPanel(d)
			p.Targets[0].Expr = strings.ReplaceAll(p.Targets[0].Expr, `job=~"$job", `, "")
		}},
		{"target-instance-rule", func(d *Dashboard) {
			p := firstPromPanel(d)
			p.Targets[0].Expr = strings.ReplaceAll(p.Targets[0].Expr, `instance=~"$instance"`, `instance="a:8080"`)
		}},
		{"target-rate-interval-rule", func(d *Dashboard) {
			p := panelWith(d, "rate(")
			p.Targets[0].Expr = strings.Replace(p.Targets[0].Expr, "[$__rate_interval]", "[5m]", 1)
		}},
		{"target-counter-agg-rule", func(d *Dashboard) {
			p := firstPromPanel(d)
			p.Targets[0].Expr = `sum(quota_apply_total{job=~"$job", instance=~"$instance"})`
		}},
		{"target-promql-rule", func(d *Dashboard) {
			p := firstPromPanel(d)
			p.Targets[0].Expr = `sum by (resource (x)`
		}},
		{"panel-title-description-rule", func(d *Dashboard) { firstPromPanel(d).Description = "" }},
		{"panel-units-rule", func(d *Dashboard) { firstPromPanel(d).FieldConfig.Defaults.Unit = "furlongs" }},
		{"panel-datasource-rule", func(d *Dashboard) { firstPromPanel(d).Datasource = json.RawMessage(`{"uid":"prometheus"}`) }},
		{"template-job-rule", func(d *Dashboard) { d.Templating.List[2].AllValue = ".*" }},
		{"template-instance-rule", func(d *Dashboard) { d.Templating.List[3].Multi = false }},
		{"template-datasource-rule", func(d *Dashboard) { d.Templating.List[0].Label = "Prometheus" }},
		{"template-on-time-change-reload-rule", func(d *Dashboard) { d.Templating.List[4].Refresh = 1 }},
		{"template-label-promql-rule", func(d *Dashboard) {
			d.Templating.List[4].RawQuery = json.RawMessage(`"label_values(quota_apply_total{job=~, resource)"`)
		}},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			d, _ := loadDashboard(t)
			c.inject(&d)
			found := false
			for _, f := range Lint(d) {
				found = found || strings.HasPrefix(f, c.rule+":")
			}
			if !found {
				t.Errorf("no %s finding; findings: %q", c.rule, Lint(d))
			}
		})
	}
}

func firstPromPanel(d *Dashboard) *Panel {
	return panelWith(d, "")
}

// panelWith is the first top-level timeseries panel on Prometheus whose
// first target contains s.
func panelWith(d *Dashboard, s string) *Panel {
	for i := range d.Panels {
		p := &d.Panels[i]
		if p.Type == "timeseries" && len(p.Targets) > 0 && p.Targets[0].Expr != "" && strings.Contains(p.Targets[0].Expr, s) {
			return p
		}
	}
	panic("no panel with " + s)
}

// The seed's five panels (seed 000 §5.2), and the rules of this project on
// top of the linter's.
func TestDashboardSeedPanels(t *testing.T) {
	d, raw := loadDashboard(t)
	byID := map[int]Panel{}
	for _, p := range d.allPanels() {
		byID[p.ID] = p
	}
	rawPanels := map[float64]map[string]any{}
	for _, p := range raw["panels"].([]any) {
		m := p.(map[string]any)
		rawPanels[m["id"].(float64)] = m
	}

	// 1. Remaining (DURATION) with a warning line at one hour.
	p := byID[41]
	if !strings.Contains(p.Targets[0].Expr, "quota_remaining_seconds{") {
		t.Errorf("panel 41 does not show quota_remaining_seconds: %s", p.Targets[0].Expr)
	}
	fc := rawPanels[41]["fieldConfig"].(map[string]any)["defaults"].(map[string]any)
	steps := fc["thresholds"].(map[string]any)["steps"].([]any)
	if v := steps[len(steps)-1].(map[string]any)["value"]; v != 3600.0 {
		t.Errorf("panel 41's threshold is %v, want 3600 (one hour)", v)
	}
	if mode := fc["custom"].(map[string]any)["thresholdsStyle"].(map[string]any)["mode"]; !strings.HasPrefix(mode.(string), "line") {
		t.Errorf("panel 41's threshold is not drawn as a line: %v", mode)
	}
	// 2. Burn rate with a forecast that needs consumption now.
	if e := byID[4].Targets[0].Expr; !strings.Contains(e, "irate(") || !strings.Contains(e, "quota_refunded_") {
		t.Errorf("forecast is not gated on current grants or ignores refunds: %s", e)
	}
	if e := byID[5].Targets[0].Expr; !strings.Contains(e, "quota_granted_") || strings.Contains(e, "deriv(") {
		t.Errorf("burn rate is not the counters' net burn: %s", e)
	}
	// 3. Refusal rate.
	if e := byID[9].Targets[0].Expr; !strings.Contains(e, "quota_exhausted_total") || !strings.Contains(e, "/") {
		t.Errorf("panel 9 is not exhausted / applies: %s", e)
	}
	// 4 and 5. From the ledger, through the templated MySQL data source.
	for id, want := range map[int]string{42: "GROUP BY status", 43: "GROUP BY resource_name, client_id"} {
		p := byID[id]
		if uid, typ := dsUID(p.Datasource); uid != "${mysql_datasource}" || typ != "mysql" {
			t.Errorf("panel %d uses data source %q (%s), want ${mysql_datasource}", id, uid, typ)
		}
		for _, tg := range p.Targets {
			if uid, _ := dsUID(tg.Datasource); uid != "${mysql_datasource}" {
				t.Errorf("panel %d target uses %q", id, uid)
			}
			if !strings.Contains(tg.RawSQL, want) || !strings.Contains(tg.RawSQL, "FROM quota_usage") ||
				!strings.Contains(tg.RawSQL, "$__unixEpochFrom()") || !strings.Contains(tg.RawSQL, "${resource:sqlstring}") {
				t.Errorf("panel %d SQL does not read the ledger in the time range by resource: %s", id, tg.RawSQL)
			}
		}
	}

	// Client ids never become Prometheus labels: no PromQL names them.
	clientLabel := regexp.MustCompile(`client`)
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			if clientLabel.MatchString(tg.Expr) {
				t.Errorf("panel %d PromQL mentions a client: %s", p.ID, tg.Expr)
			}
			if tg.Expr == "" && tg.RawSQL == "" {
				t.Errorf("panel %d has an empty target", p.ID)
			}
			if tg.RawSQL != "" {
				if uid, _ := dsUID(tg.Datasource); uid != "${mysql_datasource}" {
					t.Errorf("panel %d SQL target on %q", p.ID, uid)
				}
			}
		}
	}
	// Panel ids are unique (Grafana keys links and state on them).
	seen := map[int]bool{}
	for _, p := range d.allPanels() {
		if seen[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		seen[p.ID] = true
	}
}
