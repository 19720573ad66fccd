package spec

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var budgetNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,254}$`)

var budgetFields = []string{"$schema", "name", "description", "scope", "amount", "period", "start", "end", "thresholds", "actions"}

var budgetStatusFields = map[string]bool{"workspace": true, "created_on": true, "period_start": true, "spent": true,
	"checked_on": true, "alerts": true, "etag": true}

// ParseBudget parses a budget file (tide's own resource: Azure ML has
// none):
//
//	name: gpu-monthly
//	scope: {compute: gpu-cluster}   # or {tag: team=vision}; none: the workspace
//	amount: 500                     # per period, in USD
//	period: monthly                 # weekly, daily, or custom with start and end
//	thresholds: [50, 80, 100]       # percent; the default
//	actions: {webhook: https://hooks.example.com/tide, pause: true}
func ParseBudget(file string, data []byte, sets []string) (*api.Budget, error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, d.err()
	}
	b := &api.Budget{Period: api.BudgetMonthly}
	d.mapping(root, "", budgetFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "$schema":
		case "name":
			b.Name, _ = d.str(v, fp)
		case "description":
			b.Description, _ = d.str(v, fp)
		case "scope":
			d.mapping(v, fp, []string{"compute", "tag"}, func(k string, sv *yaml.Node, sp string) bool {
				switch k {
				case "compute":
					b.Scope.Compute, _ = d.str(sv, sp)
				case "tag":
					b.Scope.Tag, _ = d.str(sv, sp)
				}
				return true
			})
		case "amount":
			b.Amount, _ = d.number(v, fp)
		case "period":
			s, _ := d.str(v, fp)
			b.Period = strings.ToLower(strings.TrimSpace(s))
		case "start", "end":
			s, _ := d.str(v, fp)
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				d.add(v.Line, fp, "must be an RFC 3339 time like 2026-12-01T00:00:00Z (got %q)", s)
				return true
			}
			if key == "start" {
				b.Start = t.UTC()
			} else {
				b.End = t.UTC()
			}
		case "thresholds":
			if v.Kind != yaml.SequenceNode {
				d.add(v.Line, fp, "must be a list of percentages, e.g. [50, 80, 100]")
				return true
			}
			for i, item := range v.Content {
				if x, ok := d.number(item, fmt.Sprintf("%s[%d]", fp, i)); ok {
					b.Thresholds = append(b.Thresholds, x)
				}
			}
		case "actions":
			d.mapping(v, fp, []string{"webhook", "pause"}, func(k string, av *yaml.Node, ap string) bool {
				switch k {
				case "webhook":
					b.Actions.Webhook, _ = d.str(av, ap)
				case "pause":
					b.Actions.Pause, _ = d.boolean(av, ap)
				}
				return true
			})
		default:
			if budgetStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if len(d.errs) == 0 {
		ValidateBudget(b, func(field, format string, args ...any) { d.add(d.lineFor(field), field, format, args...) })
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return b, nil
}

// number reads a finite number.
func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	if n.Kind != yaml.ScalarNode {
		d.add(n.Line, path, "must be a number")
		return 0, false
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.add(n.Line, path, "must be a number (got %q)", n.Value)
		return 0, false
	}
	return v, true
}

// ValidateBudget checks a budget's fields and fills in the default
// thresholds, reporting each problem with bad.
func ValidateBudget(b *api.Budget, bad func(field, format string, args ...any)) {
	if !budgetNameRE.MatchString(b.Name) {
		bad("name", "required: letters, digits, '-' and '_', starting with a letter, at most 255 characters (got %q)", b.Name)
	}
	if b.Amount <= 0 || b.Amount > 1e12 {
		bad("amount", "must be more than 0 and at most 1e12 (USD per period; got %g)", b.Amount)
	}
	periods := []string{api.BudgetMonthly, api.BudgetWeekly, api.BudgetDaily, api.BudgetCustom}
	if !slices.Contains(periods, b.Period) {
		bad("period", "%q: one of %s", b.Period, strings.Join(periods, ", "))
	}
	switch {
	case b.Period == api.BudgetCustom && (b.Start.IsZero() || b.End.IsZero() || !b.End.After(b.Start)):
		bad("end", "a custom period needs start and end, end after start")
	case b.Period != api.BudgetCustom && (!b.Start.IsZero() || !b.End.IsZero()):
		bad("start", "start and end go with period: custom (a %s period starts by the calendar, UTC)", b.Period)
	}
	if b.Scope.Compute != "" && b.Scope.Tag != "" {
		bad("scope", "give compute or tag, not both")
	}
	if t := b.Scope.Tag; t != "" {
		if k, _, ok := strings.Cut(t, "="); !ok || k == "" {
			bad("scope.tag", "%q: want key=value, e.g. team=vision", t)
		}
	}
	if len(b.Thresholds) == 0 {
		b.Thresholds = []float64{50, 80, 100}
	}
	seen := map[float64]bool{}
	for i, t := range b.Thresholds {
		if t <= 0 || t > 1000 {
			bad(fmt.Sprintf("thresholds[%d]", i), "must be a percentage above 0 and at most 1000 (got %g)", t)
		}
		if seen[t] {
			bad(fmt.Sprintf("thresholds[%d]", i), "%g is listed twice", t)
		}
		seen[t] = true
	}
	slices.Sort(b.Thresholds)
	if w := b.Actions.Webhook; w != "" {
		u, err := url.Parse(w)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("actions.webhook", "%q: want an http:// or https:// URL", w)
		}
	}
}
