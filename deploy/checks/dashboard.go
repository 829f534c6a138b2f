package checks

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// This file holds the rules of grafana/dashboard-linter (its lint package,
// version of June 2026) as they apply in strict mode, where a warning is a
// finding too. The linter itself is not served by the Go module proxy, so
// its rules are restated here on the same data: the dashboard JSON, its
// template variables, and every PromQL target parsed by Prometheus' own
// parser after the linter's variable expansion.

// Dashboard is the part of a Grafana dashboard JSON the rules read.
type Dashboard struct {
	Title      string `json:"title"`
	Editable   bool   `json:"editable"`
	Templating struct {
		List []Template `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Template is a dashboard variable.
type Template struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	RawQuery   json.RawMessage `json:"query"`
	Datasource json.RawMessage `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Refresh    int             `json:"refresh"`
}

// Query is the variable's query string: a plain string, or the "query"
// field of an object.
func (t Template) Query() string {
	var s string
	if json.Unmarshal(t.RawQuery, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(t.RawQuery, &o)
	return o.Query
}

// Panel is a dashboard panel (rows hold nested panels).
type Panel struct {
	ID          int             `json:"id"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Type        string          `json:"type"`
	Datasource  json.RawMessage `json:"datasource"`
	Targets     []Target        `json:"targets"`
	Panels      []Panel         `json:"panels"`
	FieldConfig *struct {
		Defaults struct {
			Unit     string          `json:"unit"`
			Mappings json.RawMessage `json:"mappings"`
		} `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Options json.RawMessage `json:"options"`
}

// Target is one query of a panel.
type Target struct {
	Datasource json.RawMessage `json:"datasource"`
	Expr       string          `json:"expr"`
	RawSQL     string          `json:"rawSql"`
	RefID      string          `json:"refId"`
}

// dsUID is the uid of a datasource reference: a string, or {"uid": …}.
func dsUID(raw json.RawMessage) (uid, typ string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, ""
	}
	var o struct{ UID, Type string }
	_ = json.Unmarshal(raw, &o)
	return o.UID, o.Type
}

// allPanels flattens rows.
func (d Dashboard) allPanels() []Panel {
	var out []Panel
	var walk func(ps []Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func (d Dashboard) templatesOfType(t string) []Template {
	var out []Template
	for _, v := range d.Templating.List {
		if strings.EqualFold(v.Type, t) {
			out = append(out, v)
		}
	}
	return out
}

func (d Dashboard) template(name string) *Template {
	for _, v := range d.Templating.List {
		if v.Name == name {
			return &v
		}
	}
	return nil
}

// promDatasource is the linter's getTemplateDatasource: the first datasource
// variable; the PromQL rules run only when it is a Prometheus one.
func (d Dashboard) promDatasource() bool {
	ds := d.templatesOfType("datasource")
	return len(ds) > 0 && ds[0].Query() == "prometheus"
}

// The values the linter substitutes for Grafana's global variables.
var globalVariables = map[string]string{
	"__rate_interval": "8869990787ms",
	"__interval":      "4867856611ms",
	"__interval_ms":   "7781188786",
	"__range_ms":      "6737667980",
	"__range_s":       "9397795485",
	"__range":         "6069770749ms",
	"__auto":          "12345ms",
}

var variableRegexp = regexp.MustCompile(`\$([[:word:]]+)|\$\{([^}]+)\}|\[\[([^\[\]]+)\]\]`)

// expandVariables replaces variables outside double-quoted strings, as the
// linter does: globals by their sample value, anything else by its name.
func expandVariables(expr string) string {
	parts := strings.Split(expr, `"`)
	for i := 0; i < len(parts); i += 2 {
		parts[i] = variableRegexp.ReplaceAllStringFunc(parts[i], func(m string) string {
			sub := variableRegexp.FindStringSubmatch(m)
			name := sub[1] + sub[2] + sub[3]
			name, _, _ = strings.Cut(name, ":")
			if v, ok := globalVariables[name]; ok {
				return v
			}
			return name
		})
	}
	return strings.Join(parts, `"`)
}

func parsePromQL(expr string) (parser.Expr, error) {
	return parser.NewParser(parser.Options{}).ParseExpr(expandVariables(expr))
}

var rateInterval = func() time.Duration {
	d, err := time.ParseDuration(globalVariables["__rate_interval"])
	if err != nil {
		panic(err)
	}
	return d
}()

// Panel types each rule looks at, as in the linter.
var (
	datasourcePanelTypes = []string{"singlestat", "graph", "table", "timeseries"}
	describedPanelTypes  = []string{"stat", "singlestat", "graph", "table", "timeseries", "gauge"}
	queryPanelTypes      = []string{"singlestat", "gauge", "table", "stat", "state-timeline", "timeseries"}
)

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// validUnits is the linter's list of Grafana units.
var validUnits = strings.Fields(`none string short percent percentunit humidity dB hex0x hex sci locale pixel
accMS2 accFS2 accG degree radian grad arcmin arcsec areaM2 areaF2 areaMI2
flops mflops gflops tflops pflops eflops zflops yflops ppm conppb conngm3 conngNm3 conμgm3 conμgNm3 conmgm3 conmgNm3 congm3 congNm3 conmgdL conmmolL
bytes decbytes bits decbits kbytes deckbytes mbytes decmbytes gbytes decgbytes tbytes dectbytes pbytes decpbytes
pps binBps Bps binbps bps KiBs Kibits KBs Kbits MiBs Mibits MBs Mbits GiBs Gibits GBs Gbits TiBs Tibits TBs Tbits PiBs Pibits PBs Pbits
dateTimeAsIso dateTimeAsIsoNoDateIfToday dateTimeAsUS dateTimeAsUSNoDateIfToday dateTimeAsLocal dateTimeAsLocalNoDateIfToday dateTimeAsSystem dateTimeFromNow
hertz ns µs ms s m h d dtdurationms dtdurations dthms dtdhms timeticks clockms clocks
cps ops reqps rps wps iops cpm opm rpm wpm mps mpm bool bool_yes_no bool_on_off`)

// Lint returns every finding of the strict rule set, one line each:
// "<rule>: <where>: <what>".
func Lint(d Dashboard) []string {
	var out []string
	add := func(rule, where, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s: %s", rule, where, fmt.Sprintf(format, args...)))
	}
	dash := fmt.Sprintf("dashboard %q", d.Title)

	// uneditable-dashboard
	if d.Editable {
		add("uneditable-dashboard", dash, "is editable, it should be set to 'editable: false'")
	}

	// template-datasource-rule (the label check is a warning: an error in strict mode)
	dss := d.templatesOfType("datasource")
	if len(dss) == 0 {
		add("template-datasource-rule", dash, "does not have a templated data source")
	}
	for _, ds := range dss {
		q := ds.Query()
		names := map[string]bool{strings.ToLower(q) + "_datasource": true}
		label := map[string]bool{strings.ToUpper(q[:1]) + strings.ToLower(q[1:]) + " data source": true}
		if len(dss) == 1 {
			names["datasource"], label["Data source"] = true, true
		}
		if !names[ds.Name] {
			add("template-datasource-rule", dash, "templated data source variable named %q, should be one of %v", ds.Name, keys(names))
		}
		if !label[ds.Label] {
			add("template-datasource-rule", dash, "templated data source variable labeled %q, should be one of %v", ds.Label, keys(label))
		}
	}

	if d.promDatasource() {
		// template-job-rule, template-instance-rule
		for _, name := range []string{"job", "instance"} {
			t := d.template(name)
			if t == nil {
				add("template-"+name+"-rule", dash, "is missing the %s template", name)
				continue
			}
			uid, _ := dsUID(t.Datasource)
			switch uid {
			case "$datasource", "${datasource}", "$prometheus_datasource", "${prometheus_datasource}":
			default:
				add("template-"+name+"-rule", dash, "%s template should use datasource '$datasource', is currently %q", name, uid)
			}
			if t.Type != "query" {
				add("template-"+name+"-rule", dash, "%s template should be a Prometheus query, is currently %q", name, t.Type)
			}
			if want := strings.ToUpper(name[:1]) + name[1:]; t.Label != want {
				add("template-"+name+"-rule", dash, "%s template should be labeled %q, is currently %q", name, want, t.Label)
			}
			if !t.Multi {
				add("template-"+name+"-rule", dash, "%s template should be a multi select", name)
			}
			if t.AllValue != ".+" {
				add("template-"+name+"-rule", dash, "%s template allValue should be '.+', is currently %q", name, t.AllValue)
			}
		}
		// template-label-promql-rule
		for _, t := range d.Templating.List {
			if t.Type != "query" {
				continue
			}
			if err := checkTemplateQuery(t.Query()); err != nil {
				add("template-label-promql-rule", dash, "template %q invalid templated label %q: %v", t.Name, t.Query(), err)
			}
		}
	}

	// template-on-time-change-reload-rule
	for _, t := range d.Templating.List {
		if t.Type == "query" && t.Refresh != 2 {
			add("template-on-time-change-reload-rule", dash, "variable %q should refresh on time range change (2), is %d", t.Name, t.Refresh)
		}
	}

	dsVars := map[string]bool{}
	for _, ds := range dss {
		dsVars["$"+ds.Name], dsVars["${"+ds.Name+"}"] = true, true
	}
	for _, p := range d.allPanels() {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		// panel-datasource-rule
		if oneOf(p.Type, datasourcePanelTypes) {
			if uid, _ := dsUID(p.Datasource); !dsVars[uid] {
				add("panel-datasource-rule", where, "does not use a templated datasource, uses %q", uid)
			}
		}
		if oneOf(p.Type, describedPanelTypes) {
			// panel-title-description-rule
			if p.Title == "" || p.Description == "" {
				add("panel-title-description-rule", where, "has missing title or description")
			}
			// panel-units-rule
			if !hasUnitOrMappings(p) {
				add("panel-units-rule", where, "has no or invalid units defined: %q", configuredUnit(p))
			}
			// panel-no-targets-rule
			if p.Targets == nil {
				add("panel-no-targets-rule", where, "has no targets")
			}
		}
		if !d.promDatasource() {
			continue
		}
		for i, t := range p.Targets {
			twhere := fmt.Sprintf("%s target %d", where, i)
			expr, err := parsePromQL(t.Expr)
			// target-promql-rule
			if oneOf(p.Type, queryPanelTypes) && err != nil {
				add("target-promql-rule", twhere, "invalid PromQL query %q: %v", t.Expr, err)
			}
			if err != nil {
				continue
			}
			// target-rate-interval-rule
			if oneOf(p.Type, queryPanelTypes) {
				if err := checkRateInterval(expr); err != nil {
					add("target-rate-interval-rule", twhere, "invalid PromQL query %q: %v", t.Expr, err)
				}
			}
			// target-job-rule, target-instance-rule
			for _, name := range []string{"job", "instance"} {
				for _, sel := range parser.ExtractSelectors(expr) {
					if err := checkForMatcher(sel, name, labels.MatchRegexp, "$"+name); err != nil {
						add("target-"+name+"-rule", twhere, "invalid PromQL query %q: %v", t.Expr, err)
					}
				}
			}
			// target-counter-agg-rule
			if err := checkCounterAgg(expr); err != nil {
				add("target-counter-agg-rule", twhere, "%v", err)
			}
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

var templatedLabel = regexp.MustCompile(`^([a-z_]+)\((.*)\)$`)
