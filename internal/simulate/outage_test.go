package simulate

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// TestCapacityOutage replays a trace with and without a capacity outage.
// One job at 0 boots a node that idles out at 400 s; then a job arrives
// every minute from 600 s. Capacity is unavailable from 600 s for 30
// minutes: no node can be created, so no job starts inside the window;
// the refused creations back the compute off as the controller does
// (1 s, 2 s, 4 s ... 256 s), so the first node after the window is
// created at the next retry, within 256 s of its end, and every job then
// completes.
func TestCapacityOutage(t *testing.T) {
	var b strings.Builder
	b.WriteString("submit,duration,instance_count\n0,100,1\n")
	for k := range 40 {
		fmt.Fprintf(&b, "%d,30,1\n", 600+60*k)
	}
	c := compute(t, "max_instances: 8\nidle_time_before_scale_down: 120\n")
	cfg := Config{BootTime: 180 * time.Second}
	read := func() *Trace {
		tr, err := ReadTrace("t.csv", strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	calm := runOn(t, read(), c, cfg)
	if calm.MaxWait > 180 || calm.CapacityFailures != 0 {
		t.Fatalf("without an outage: longest wait %.0f s (want at most the 180 s boot), %d creations refused", calm.MaxWait, calm.CapacityFailures)
	}

	from, until := 600*time.Second, 2400*time.Second
	cfg.CapacityOutage = Outage{Start: from, For: until - from}
	tr := read()
	out := runOn(t, tr, c, cfg)
	if out.Failed != 0 || out.CapacityFailures == 0 {
		t.Fatalf("with the outage: %d failed jobs, %d creations refused; want 0 failed and some refused", out.Failed, out.CapacityFailures)
	}
	first := time.Duration(math.MaxInt64) // the first start after the window
	for i, j := range tr.Jobs {
		w := out.jobWaits[i]
		if math.IsNaN(w) {
			t.Fatalf("job %d (submitted at %s) never started", i, j.Submit)
		}
		start := j.Submit + time.Duration(w*float64(time.Second))
		if start >= from && start < until {
			t.Errorf("job %d started at %s, inside the outage (%s to %s)", i, start, from, until)
		}
		if start >= until {
			first = min(first, start)
		}
	}
	// Backed off, not retried at once when the window ends, and not longer
	// than the longest back-off step (256 s) either.
	if lo, hi := until+cfg.BootTime, until+256*time.Second+cfg.BootTime; first <= lo || first > hi {
		t.Errorf("the first job after the outage started at %s; want after %s (a back-off step) and by %s", first, lo, hi)
	}
	if out.Wait.Mean <= calm.Wait.Mean || out.MaxWait < (until-from).Seconds() {
		t.Errorf("waits with the outage (mean %.0f s, longest %.0f s) not longer than without (mean %.0f s) by the window", out.Wait.Mean, out.MaxWait, calm.Wait.Mean)
	}
	t.Logf("without: mean wait %.0f s, %.2f node-hours; with a 30 min outage: mean wait %.0f s, longest %.0f s, %.2f node-hours, %d creations refused, first start after it at %s",
		calm.Wait.Mean, calm.NodeHours.Total, out.Wait.Mean, out.MaxWait, out.NodeHours.Total, out.CapacityFailures, first)
}
