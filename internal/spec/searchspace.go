package spec

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var exprRE = regexp.MustCompile(`^\s*([A-Za-z_]+)\s*\((.*)\)\s*$`)

// distFields are the fields of each distribution type, in the order of
// the expression form's arguments (uniform(min_value, max_value)).
var distFields = map[string][]string{
	api.DistChoice:      {"values"},
	api.DistRandint:     {"upper"},
	api.DistUniform:     {"min_value", "max_value"},
	api.DistLoguniform:  {"min_value", "max_value"},
	api.DistQuniform:    {"min_value", "max_value", "q"},
	api.DistQloguniform: {"min_value", "max_value", "q"},
	api.DistNormal:      {"mu", "sigma"},
	api.DistLognormal:   {"mu", "sigma"},
	api.DistQnormal:     {"mu", "sigma", "q"},
	api.DistQlognormal:  {"mu", "sigma", "q"},
}

const distTypesText = "choice, randint, uniform, loguniform, quniform, qloguniform, normal, lognormal, qnormal or qlognormal"

// searchDist decodes one search space parameter: a mapping with a type
// (Azure's file form) or an expression such as uniform(0.1, 1.0).
func (d *decoder) searchDist(n *yaml.Node, path string) api.SearchDist {
	rv := resolve(n)
	if rv.Kind == yaml.ScalarNode && !isNull(rv) {
		sd, problem := ParseSearchExpr(rv.Value)
		if problem != "" {
			d.add(rv.Line, path, "%s", problem)
		}
		return sd
	}
	sd := api.SearchDist{}
	known := []string{"type", "values", "upper", "min_value", "max_value", "mu", "sigma", "q"}
	given := map[string]bool{}
	d.mapping(rv, path, known, func(key string, v *yaml.Node, fp string) bool {
		given[key] = true
		switch key {
		case "type":
			s, _ := d.str(v, fp)
			sd.Type = strings.ToLower(strings.TrimSpace(s))
		case "values":
			sd.Values = d.choiceValues(v, fp)
		case "upper":
			if u, ok := d.integer(v, fp); ok {
				sd.Upper = &u
			}
		case "min_value":
			sd.MinValue = d.optNumber(v, fp)
		case "max_value":
			sd.MaxValue = d.optNumber(v, fp)
		case "mu":
			sd.Mu = d.optNumber(v, fp)
		case "sigma":
			sd.Sigma = d.optNumber(v, fp)
		case "q":
			sd.Q = d.optNumber(v, fp)
		default:
			return false
		}
		return true
	})
	if fields, ok := distFields[sd.Type]; ok {
		for _, f := range sortedNames(given) {
			if f != "type" && !slices.Contains(fields, f) {
				d.add(d.lines[path+"."+f], path+"."+f, "not a field of a %s distribution; it has %s", sd.Type, strings.Join(fields, ", "))
			}
		}
	}
	return sd
}

func (d *decoder) choiceValues(n *yaml.Node, path string) []string {
	rv := resolve(n)
	if rv.Kind != yaml.SequenceNode {
		d.add(rv.Line, path, "must be a list of values, e.g. [0.01, 0.1, 1], got %s", describe(rv))
		return nil
	}
	out := make([]string, 0, len(rv.Content))
	for i, v := range rv.Content {
		v = resolve(v)
		if v.Kind != yaml.ScalarNode || isNull(v) {
			d.add(v.Line, fmt.Sprintf("%s[%d]", path, i), "must be a string, number or boolean (nested search spaces are not supported yet), got %s", describe(v))
			continue
		}
		out = append(out, v.Value)
	}
	return out
}

// optNumber decodes a number field; nil when it is absent or not a number.
func (d *decoder) optNumber(n *yaml.Node, path string) *float64 {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if f, ok := d.number(n, path); ok {
		return &f
	}
	return nil
}

// ParseSearchExpr parses a search space expression: choice(1, 2, 3),
// choice("a", "b"), randint(10), uniform(0.1, 1.0), quniform(0, 10, 2),
// normal(0, 1) and the other distributions with their fields in order.
// problem says why one does not parse.
func ParseSearchExpr(s string) (api.SearchDist, string) {
	m := exprRE.FindStringSubmatch(s)
	if m == nil {
		return api.SearchDist{}, fmt.Sprintf("%q is not a distribution: write a mapping with type (%s) and its fields, or an expression such as uniform(0.1, 1.0)", s, distTypesText)
	}
	typ := strings.ToLower(m[1])
	fields, ok := distFields[typ]
	if !ok {
		return api.SearchDist{}, fmt.Sprintf("%q: unknown distribution %s; use %s", s, m[1], distTypesText)
	}
	list := strings.TrimSpace(m[2])
	if typ == api.DistChoice && strings.HasPrefix(list, "[") && strings.HasSuffix(list, "]") {
		list = list[1 : len(list)-1] // choice([1, 2]) as in Azure's SDK
	}
	args, problem := splitArgs(list)
	if problem != "" {
		return api.SearchDist{}, fmt.Sprintf("%q: %s", s, problem)
	}
	sd := api.SearchDist{Type: typ}
	if typ == api.DistChoice {
		sd.Values = args
		return sd, ""
	}
	if len(args) != len(fields) {
		return api.SearchDist{}, fmt.Sprintf("%q: %s takes %d argument(s) (%s), got %d", s, typ, len(fields), strings.Join(fields, ", "), len(args))
	}
	for i, f := range fields {
		v, err := strconv.ParseFloat(args[i], 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return api.SearchDist{}, fmt.Sprintf("%q: %s must be a number, got %q", s, f, args[i])
		}
		switch f {
		case "upper":
			if v != math.Trunc(v) {
				return api.SearchDist{}, fmt.Sprintf("%q: upper must be an integer, got %s", s, args[i])
			}
			u := int(v)
			sd.Upper = &u
		case "min_value":
			sd.MinValue = &v
		case "max_value":
			sd.MaxValue = &v
		case "mu":
			sd.Mu = &v
		case "sigma":
			sd.Sigma = &v
		case "q":
			sd.Q = &v
		}
	}
	return sd, ""
}

// splitArgs splits a comma-separated argument list; quoted strings lose
// their quotes and may hold commas.
func splitArgs(s string) ([]string, string) {
	var out []string
	var cur strings.Builder
	quote, quoted := byte(0), false
	flush := func() string {
		a := strings.TrimSpace(cur.String())
		cur.Reset()
		if a == "" && !quoted {
			return "an empty argument"
		}
		out = append(out, a)
		quoted = false
		return ""
	}
	if strings.TrimSpace(s) == "" {
		return nil, "no arguments"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, quoted = c, true
		case c == ',':
			if p := flush(); p != "" {
				return nil, p
			}
		default:
			cur.WriteByte(c)
		}
	}
	if quote != 0 {
		return nil, "a quote is not closed"
	}
	if p := flush(); p != "" {
		return nil, p
	}
	return out, ""
}

// GridSize is the number of points of a grid over space (choice and
// randint parameters); it saturates at math.MaxInt32.
func GridSize(space map[string]api.SearchDist) int {
	n := 1
	for _, sd := range space {
		k := len(sd.Values)
		if sd.Type == api.DistRandint && sd.Upper != nil {
			k = *sd.Upper
		}
		if k <= 0 {
			return 0
		}
		if n > math.MaxInt32/k {
			return math.MaxInt32
		}
		n *= k
	}
	return n
}

// checkDist checks one search space parameter.
func checkDist(sd api.SearchDist, fp string, bad func(field, format string, args ...any)) {
	fields, ok := distFields[sd.Type]
	if !ok {
		if sd.Type == "" {
			bad(fp+".type", "required; one of %s", distTypesText)
		} else {
			bad(fp+".type", "unknown distribution %q; use %s", sd.Type, distTypesText)
		}
		return
	}
	present := map[string]bool{"values": sd.Values != nil, "upper": sd.Upper != nil, "min_value": sd.MinValue != nil,
		"max_value": sd.MaxValue != nil, "mu": sd.Mu != nil, "sigma": sd.Sigma != nil, "q": sd.Q != nil}
	missing := false
	for _, f := range fields {
		if !present[f] {
			bad(fp+"."+f, "required for a %s distribution (its fields: %s)", sd.Type, strings.Join(fields, ", "))
			missing = true
		}
	}
	if missing {
		return
	}
	switch {
	case sd.Type == api.DistChoice && len(sd.Values) == 0:
		bad(fp+".values", "must list at least one value")
	case sd.Type == api.DistRandint && *sd.Upper < 1:
		bad(fp+".upper", "must be >= 1 (values are 0 to upper-1), got %d", *sd.Upper)
	case sd.MinValue != nil && *sd.MinValue >= *sd.MaxValue:
		bad(fp+".max_value", "must be greater than min_value (%g >= %g)", *sd.MinValue, *sd.MaxValue)
	case sd.Sigma != nil && *sd.Sigma <= 0:
		bad(fp+".sigma", "must be > 0, got %g", *sd.Sigma)
	}
	if sd.Q != nil && *sd.Q <= 0 {
		bad(fp+".q", "must be > 0, got %g", *sd.Q)
	}
	if sd.Type == api.DistChoice {
		seen := map[string]bool{}
		for _, v := range sd.Values {
			if seen[v] {
				bad(fp+".values", "%q is listed twice", v)
			}
			seen[v] = true
		}
	}
}
