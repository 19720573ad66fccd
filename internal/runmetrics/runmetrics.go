// Package runmetrics reads the metrics jobs log: lines of their standard
// output of the form
//
//	##tide metric NAME=VALUE [NAME=VALUE ...] [step=N]
//
// (api.MetricPrefix), which a script prints without any library, e.g. in
// Python print(f"##tide metric accuracy={acc} step={epoch}"). It also
// numbers the steps of series logged without one and picks the latest
// value of each metric.
package runmetrics

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
)

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-/]{0,127}$`)

// Parse reads the metrics of one log line. ok is false for a line that is
// not a metric line; problem says what is wrong with one that is but does
// not parse (the job's log shows the line, and tide stores nothing of it).
func Parse(line api.LogLine) (ms []api.Metric, ok bool, problem string) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line.Text), strings.TrimSpace(api.MetricPrefix))
	if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
		return nil, false, ""
	}
	step := int64(-1)
	for _, f := range strings.Fields(rest) {
		name, val, found := strings.Cut(f, "=")
		if !found {
			return nil, true, "want NAME=VALUE, got " + strconv.Quote(f)
		}
		if name == "step" {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return nil, true, "step must be a whole number >= 0, got " + strconv.Quote(val)
			}
			step = n
			continue
		}
		if !nameRE.MatchString(name) {
			return nil, true, "metric name " + strconv.Quote(name) + " must be letters, digits, '_', '.', '-' and '/'"
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, true, "metric " + name + ": " + strconv.Quote(val) + " is not a finite number"
		}
		ms = append(ms, api.Metric{Name: name, Value: v, Seq: line.Seq, Time: line.Time})
	}
	if len(ms) == 0 {
		return nil, true, "no NAME=VALUE after " + strings.TrimSpace(api.MetricPrefix)
	}
	for i := range ms {
		ms[i].Step = step
	}
	return ms, true, ""
}

// FromLines returns the metrics of the stdout lines among lines (which the
// store numbered), with the problems of lines that did not parse.
func FromLines(lines []api.LogLine) (ms []api.Metric, problems []string) {
	for _, l := range lines {
		if l.Stream != "stdout" {
			continue
		}
		got, ok, problem := Parse(l)
		if !ok {
			continue
		}
		if problem != "" {
			problems = append(problems, problem)
			continue
		}
		ms = append(ms, got...)
	}
	return ms, problems
}

// NumberSteps gives each value logged without a step its index in its
// metric's series (ms in Seq order).
func NumberSteps(ms []api.Metric) {
	count := map[string]int64{}
	for i := range ms {
		if ms[i].Step < 0 {
			ms[i].Step = count[ms[i].Name]
		}
		count[ms[i].Name]++
	}
}

// Latest returns the last value of each metric.
func Latest(ms []api.Metric) map[string]float64 {
	if len(ms) == 0 {
		return nil
	}
	out := map[string]float64{}
	for _, m := range ms {
		out[m.Name] = m.Value
	}
	return out
}

// ValidName reports whether s can name a metric.
func ValidName(s string) bool { return nameRE.MatchString(s) }
