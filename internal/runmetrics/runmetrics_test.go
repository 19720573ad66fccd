package runmetrics

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

func TestParse(t *testing.T) {
	tests := []struct {
		line    string
		ok      bool
		want    string // name=value@step ...
		problem string
	}{
		{"plain output", false, "", ""},
		{"##tide metrics acc=1", false, "", ""},
		{"##tide metric acc=0.9", true, "acc=0.9@-1", ""},
		{"  ##tide metric loss=0.25 acc=0.9 step=3  ", true, "loss=0.25@3 acc=0.9@3", ""},
		{"##tide metric train/loss=1e-3", true, "train/loss=0.001@-1", ""},
		{"##tide metric", true, "", "no NAME=VALUE after ##tide metric"},
		{"##tide metric acc", true, "", `want NAME=VALUE, got "acc"`},
		{"##tide metric acc=high", true, "", `metric acc: "high" is not a finite number`},
		{"##tide metric acc=NaN", true, "", `metric acc: "NaN" is not a finite number`},
		{"##tide metric acc=1 step=-1", true, "", `step must be a whole number >= 0, got "-1"`},
		{"##tide metric 9lives=1", true, "", `metric name "9lives" must be letters, digits, '_', '.', '-' and '/'`},
	}
	for _, tt := range tests {
		ms, ok, problem := Parse(api.LogLine{Text: tt.line, Seq: 5})
		var got []string
		for _, m := range ms {
			got = append(got, m.Name+"="+formatFloat(m.Value)+"@"+formatInt(m.Step))
			if m.Seq != 5 {
				t.Errorf("%q: seq %d", tt.line, m.Seq)
			}
		}
		if ok != tt.ok || strings.Join(got, " ") != tt.want || problem != tt.problem {
			t.Errorf("Parse(%q) = %v, %v, %q; want %s, %v, %q", tt.line, got, ok, problem, tt.want, tt.ok, tt.problem)
		}
	}
}

func TestStepsAndLatest(t *testing.T) {
	ms, problems := FromLines([]api.LogLine{
		{Seq: 1, Stream: "stdout", Text: "##tide metric loss=3"},
		{Seq: 2, Stream: "stderr", Text: "##tide metric loss=100"}, // only stdout logs metrics
		{Seq: 3, Stream: "stdout", Text: "##tide metric loss=2 acc=0.5"},
		{Seq: 4, Stream: "stdout", Text: "##tide metric loss=x"},
		{Seq: 5, Stream: "stdout", Text: "##tide metric loss=1 step=10"},
	})
	if len(problems) != 1 {
		t.Errorf("problems = %v", problems)
	}
	NumberSteps(ms)
	var got []string
	for _, m := range ms {
		got = append(got, m.Name+"@"+formatInt(m.Step))
	}
	if strings.Join(got, " ") != "loss@0 loss@1 acc@0 loss@10" {
		t.Errorf("steps = %v", got)
	}
	if l := Latest(ms); l["loss"] != 1 || l["acc"] != 0.5 || len(l) != 2 {
		t.Errorf("Latest = %v", l)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("##tide metric a=1 b=2 step=3")
	f.Add("##tide metric =")
	f.Fuzz(func(t *testing.T, line string) {
		ms, ok, problem := Parse(api.LogLine{Text: line})
		if !ok && (len(ms) > 0 || problem != "") {
			t.Fatalf("not a metric line, yet %v %q", ms, problem)
		}
		if problem != "" && len(ms) > 0 {
			t.Fatalf("a problem and metrics both")
		}
	})
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
func formatInt(i int64) string     { return strconv.FormatInt(i, 10) }
