package runmetrics

import (
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

func TestProperties(t *testing.T) {
	multi := "a\nb"
	lines := []api.LogLine{
		{Stream: "stdout", Text: "##tide param lr=0.01"},
		{Stream: "stdout", Text: PropertyLine(KindParam, "model", multi)},
		{Stream: "stdout", Text: "##tide tag team=vision and co"},
		{Stream: "stdout", Text: "##tide param lr=0.02"},
		{Stream: "stderr", Text: "##tide param ignored=1"},
		{Stream: "stdout", Text: "##tide param novalue"},
		{Stream: "stdout", Text: "##tide tag 9x=1"},
		{Stream: "stdout", Text: `##tide param q="unterminated`},
		{Stream: "stdout", Text: "##tide param big=" + strings.Repeat("x", maxPropertyValue+1)},
	}
	params, tags, problems := Properties(lines)
	if params["lr"] != "0.02" || params["model"] != multi || len(params) != 2 {
		t.Errorf("params %q", params)
	}
	if tags["team"] != "vision and co" || len(tags) != 1 {
		t.Errorf("tags %q", tags)
	}
	if len(problems) != 4 {
		t.Errorf("problems %q, want 4 (novalue, 9x, the quote, big)", problems)
	}
	if got := PropertyLine(KindTag, "q", `"quoted"`); got != `##tide tag q="\"quoted\""` {
		t.Errorf("a value starting with a quote: %s", got)
	}
}
