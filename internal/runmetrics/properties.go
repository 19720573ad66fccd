package runmetrics

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
)

// Parameters and tags a job logs (MLflow's log_param and set_tag, through
// the agent's MLflow endpoint, or printed by a script) are lines too:
//
//	##tide param NAME=VALUE
//	##tide tag NAME=VALUE
//
// VALUE is the rest of the line, or a Go/JSON-style quoted string when it
// holds a line break or starts with a quote.

// Property kinds.
const (
	KindParam = "param"
	KindTag   = "tag"
)

// maxPropertyValue is MLflow's own limit for a tag's value.
const maxPropertyValue = 8000

// CheckProperty reports what is wrong with a parameter or tag.
func CheckProperty(name, value string) error {
	if !ValidName(name) {
		return fmt.Errorf("name %q must be letters, digits, '_', '.', '-' and '/', starting with a letter or '_'", name)
	}
	if len(value) > maxPropertyValue {
		return fmt.Errorf("%s: value of %d bytes is longer than %d", name, len(value), maxPropertyValue)
	}
	return nil
}

// PropertyLine is the log line that logs a parameter or tag.
func PropertyLine(kind, name, value string) string {
	if strings.ContainsAny(value, "\r\n") || strings.HasPrefix(value, `"`) {
		value = strconv.Quote(value)
	}
	return "##tide " + kind + " " + name + "=" + value
}

// Properties returns the parameters and tags that the stdout lines among
// lines log (the last value of a name wins), with the problems of lines
// that did not parse.
func Properties(lines []api.LogLine) (params, tags map[string]string, problems []string) {
	for _, l := range lines {
		if l.Stream != "stdout" {
			continue
		}
		text := strings.TrimSpace(l.Text)
		var kind string
		switch {
		case strings.HasPrefix(text, "##tide param "):
			kind = KindParam
		case strings.HasPrefix(text, "##tide tag "):
			kind = KindTag
		default:
			continue
		}
		rest := strings.TrimPrefix(text, "##tide "+kind+" ")
		name, value, ok := strings.Cut(rest, "=")
		if !ok {
			problems = append(problems, kind+": want NAME=VALUE, got "+strconv.Quote(rest))
			continue
		}
		name = strings.TrimSpace(name)
		if strings.HasPrefix(value, `"`) {
			v, err := strconv.Unquote(value)
			if err != nil {
				problems = append(problems, kind+" "+name+": a quoted value must be one Go-quoted string")
				continue
			}
			value = v
		}
		if err := CheckProperty(name, value); err != nil {
			problems = append(problems, kind+" "+err.Error())
			continue
		}
		m := &params
		if kind == KindTag {
			m = &tags
		}
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[name] = value
	}
	return params, tags, problems
}
