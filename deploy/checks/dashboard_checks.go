package checks

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// checkTemplateQuery: label_names(), label_values([selector, ]label),
// metrics(regex) or query_result(promql); the PromQL part must parse.
func checkTemplateQuery(q string) error {
	m := templatedLabel.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return fmt.Errorf("invalid 'query': %v", q)
	}
	switch m[1] {
	case "label_names", "metrics":
		return nil
	case "query_result":
		_, err := parsePromQL(m[2])
		return err
	case "label_values":
		arg := m[2]
		i := strings.LastIndex(arg, ",")
		if i < 0 {
			return nil // label_values(label)
		}
		_, err := parsePromQL(arg[:i])
		return err
	}
	return fmt.Errorf("invalid 'function': %v", m[1])
}

func checkForMatcher(sel []*labels.Matcher, name string, ty labels.MatchType, value string) error {
	err := fmt.Errorf("%s selector not found", name)
	for _, m := range sel {
		if m.Name != name {
			continue
		}
		if m.Type == ty && m.Value == value {
			return nil
		}
		err = fmt.Errorf("%s selector is %s%q, want %s%q", name, m.Type, m.Value, ty, value)
	}
	return err
}

type inspector func(parser.Node, []parser.Node) error

func (f inspector) Visit(node parser.Node, path []parser.Node) (parser.Visitor, error) {
	if err := f(node, path); err != nil {
		return nil, err
	}
	return f, nil
}

// checkRateInterval: rate() and irate() take $__rate_interval.
func checkRateInterval(expr parser.Expr) error {
	return parser.Walk(inspector(func(node parser.Node, parents []parser.Node) error {
		sel, ok := node.(*parser.MatrixSelector)
		if !ok || sel.Range == rateInterval || len(parents) == 0 {
			return nil
		}
		call, ok := parents[len(parents)-1].(*parser.Call)
		if !ok {
			return fmt.Errorf("$__rate_interval used in non-rate function")
		}
		if call.Func.Name == "rate" || call.Func.Name == "irate" {
			return fmt.Errorf("should use $__rate_interval")
		}
		return nil
	}), expr, nil)
}

// checkCounterAgg: a counter (a name ending in _total, also through a
// __name__ matcher) is read only through rate(), irate() or increase().
// Stricter than the linter, which looks at the selector's text only.
func checkCounterAgg(expr parser.Expr) error {
	return parser.Walk(inspector(func(node parser.Node, parents []parser.Node) error {
		sel, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		isCounter := strings.HasSuffix(sel.Name, "_total")
		for _, m := range sel.LabelMatchers {
			if m.Name == model.MetricNameLabel && strings.HasSuffix(m.Value, "_total") {
				isCounter = true
			}
		}
		if !isCounter {
			return nil
		}
		err := fmt.Errorf("counter metric '%s' is not aggregated with rate, irate, or increase", sel)
		if len(parents) < 2 {
			return err
		}
		if _, ok := parents[len(parents)-1].(*parser.MatrixSelector); !ok {
			return err
		}
		call, ok := parents[len(parents)-2].(*parser.Call)
		if !ok || (call.Func.Name != "rate" && call.Func.Name != "irate" && call.Func.Name != "increase") {
			return err
		}
		return nil
	}), expr, nil)
}

func configuredUnit(p Panel) string {
	if p.FieldConfig == nil {
		return ""
	}
	unit := ""
	for _, o := range p.FieldConfig.Overrides {
		for _, prop := range o.Properties {
			if prop.ID == "unit" {
				unit, _ = prop.Value.(string)
			}
		}
	}
	if unit == "" {
		unit = p.FieldConfig.Defaults.Unit
	}
	return unit
}

func hasUnitOrMappings(p Panel) bool {
	if p.Type == "stat" {
		var o struct {
			ReduceOptions struct {
				Fields string `json:"fields"`
			} `json:"reduceOptions"`
		}
		if json.Unmarshal(p.Options, &o) == nil && o.ReduceOptions.Fields != "" {
			return true
		}
	}
	if p.FieldConfig != nil {
		for _, o := range p.FieldConfig.Overrides {
			for _, prop := range o.Properties {
				if prop.ID == "mappings" && prop.Value != nil {
					return true
				}
			}
		}
		var mappings []any
		if json.Unmarshal(p.FieldConfig.Defaults.Mappings, &mappings) == nil && len(mappings) > 0 {
			return true
		}
	}
	return oneOf(configuredUnit(p), validUnits)
}
