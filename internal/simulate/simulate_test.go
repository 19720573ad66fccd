package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/spec"
)

// compute parses a compute file with the given extra lines.
func compute(t *testing.T, extra string) *api.Compute {
	t.Helper()
	c, err := spec.ParseCompute("c.yml", []byte("type: amlcompute\nname: gpu-cluster\nsize: Standard_NC4as_T4_v3\n"+extra), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run reads a trace from text, fits it to c and simulates it.
func run(t *testing.T, trace string, c *api.Compute, cfg Config) Result {
	t.Helper()
	tr, err := ReadTrace("t.csv", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	return runOn(t, tr, c, cfg)
}

// runOn fits tr to c and simulates it.
func runOn(t *testing.T, tr *Trace, c *api.Compute, cfg Config) Result {
	t.Helper()
	if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
		t.Fatal(err)
	}
	cfg.Compute = *c
	cfg.Size, _ = catalog.Default().Lookup(c.Size)
	res, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestRunByHand checks small traces whose outcome can be worked out by
// hand: a 180 s boot, a 120 s idle time.
func TestRunByHand(t *testing.T) {
	sec := func(s float64) float64 { return s / 3600 }
	tests := []struct {
		name, trace, extra string
		policy             string
		busy, idle, boot   float64 // seconds
		waits              []float64
		cold               float64
		peak               int
	}{
		{
			name:  "one job boots a node that idles out",
			trace: "submit,duration,instance_count\n0,100,1\n",
			extra: "max_instances: 4\n",
			busy:  100, idle: 0, boot: 180, waits: []float64{180}, cold: 1, peak: 1,
		},
		{
			name:  "second job reuses the idle node",
			trace: "submit,duration,instance_count\n0,100,1\n330,50,1\n",
			extra: "max_instances: 4\n",
			// Node idle 280..330, then busy 330..380; the run ends there.
			busy: 150, idle: 50, boot: 180, waits: []float64{180, 0}, cold: 0.5, peak: 1,
		},
		{
			name:  "second job comes after the node left",
			trace: "submit,duration,instance_count\n0,100,1\n500,50,1\n",
			extra: "max_instances: 4\n",
			// The first node idles 280..400 and leaves.
			busy: 150, idle: 120, boot: 360, waits: []float64{180, 180}, cold: 1, peak: 1,
		},
		{
			name:  "gang of three",
			trace: "submit,duration,instance_count\n0,60,3\n",
			extra: "max_instances: 4\nidle_time_before_scale_down: 0\n",
			busy:  180, idle: 0, boot: 540, waits: []float64{180}, cold: 1, peak: 3,
		},
		{
			name:  "cap makes the second job wait for the first",
			trace: "submit,duration,instance_count\n0,100,1\n10,100,1\n",
			extra: "max_instances: 1\n",
			// Job 1 runs 180..280, job 2 280..380.
			busy: 200, idle: 0, boot: 180, waits: []float64{180, 270}, cold: 1, peak: 1,
		},
		{
			name:  "min_instances nodes stay to the end",
			trace: "submit,duration,instance_count\n0,100,1\n",
			extra: "min_instances: 1\nmax_instances: 2\n",
			// The min node boots 0..180 and runs the job 180..280; nothing
			// is left to wait for, so the run ends there.
			busy: 100, idle: 0, boot: 180, waits: []float64{180}, cold: 1, peak: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, tc.trace, compute(t, tc.extra), Config{BootTime: 180 * time.Second, Policy: tc.policy})
			nh := res.NodeHours
			if !near(nh.Busy, sec(tc.busy)) || !near(nh.Idle, sec(tc.idle)) || !near(nh.Booting, sec(tc.boot)) || !near(nh.Total, sec(tc.busy+tc.idle+tc.boot)) {
				t.Errorf("node seconds busy/idle/booting = %.0f/%.0f/%.0f, want %.0f/%.0f/%.0f",
					nh.Busy*3600, nh.Idle*3600, nh.Booting*3600, tc.busy, tc.idle, tc.boot)
			}
			mean := 0.0
			for _, w := range tc.waits {
				mean += w / float64(len(tc.waits))
			}
			if !near(res.Wait.Mean, mean) || !near(res.Wait.P99, slicesMax(tc.waits)) {
				t.Errorf("wait mean %v p99 %v, want %v %v", res.Wait.Mean, res.Wait.P99, mean, slicesMax(tc.waits))
			}
			if !near(res.ColdStartFraction, tc.cold) || res.PeakNodes != tc.peak || res.Jobs != len(tc.waits) {
				t.Errorf("cold %v peak %d jobs %d, want %v %d %d", res.ColdStartFraction, res.PeakNodes, res.Jobs, tc.cold, tc.peak, len(tc.waits))
			}
			size, _ := catalog.Default().Lookup("Standard_NC4as_T4_v3")
			if !near(res.Cost, nh.Total*size.PricePerHour) {
				t.Errorf("cost %v, want %v", res.Cost, nh.Total*size.PricePerHour)
			}
		})
	}
}

func slicesMax(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// randomTrace returns a bursty generic trace of n jobs.
func randomTrace(r *rand.Rand, n int) string {
	var b strings.Builder
	b.WriteString(GenericHeader + "\n")
	at := 0.0
	for range n {
		if r.IntN(3) > 0 {
			at += float64(r.IntN(400))
		}
		inst := 1
		if r.IntN(6) == 0 {
			inst = 1 + r.IntN(5)
		}
		fmt.Fprintf(&b, "%g,%d,%d,\n", at, 1+r.IntN(900), inst)
	}
	return b.String()
}

// TestSummaryMatchesFullSnapshot checks that handing Place and Plan only
// the nodes that matter gives exactly the run that listing every node
// gives, for both policies and with faults.
func TestSummaryMatchesFullSnapshot(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	configs := []struct {
		extra string
		cfg   Config
	}{
		{"max_instances: 1000\n", Config{BootTime: 180 * time.Second}},
		{"max_instances: 1000\nidle_time_before_scale_down: 0\n", Config{BootTime: 30 * time.Second}},
		{"max_instances: 6\nmin_instances: 2\nidle_time_before_scale_down: 300\n", Config{BootTime: 180 * time.Second}},
		{"max_instances: 1000\n", Config{BootTime: 180 * time.Second, Policy: autoscaler.AdaptivePolicy}},
		{"max_instances: 8\nmin_instances: 1\n", Config{BootTime: 120 * time.Second, Policy: autoscaler.AdaptivePolicy}},
		{"max_instances: 1000\ntier: low_priority\n", Config{BootTime: 60 * time.Second, BootFailureRate: 0.2, PreemptionsPerHour: 2, Seed: 3}},
		{"max_instances: 1000\ntide:\n  max_starting_nodes: 3\n", Config{BootTime: 180 * time.Second}},
	}
	for i, tc := range configs {
		for k := range 3 {
			trace := randomTrace(r, 150)
			t.Run(fmt.Sprintf("config%d/trace%d", i, k), func(t *testing.T) {
				c := compute(t, tc.extra)
				fast := run(t, trace, c, tc.cfg)
				full := tc.cfg
				full.full = true
				slow := run(t, trace, c, full)
				if !reflect.DeepEqual(fast, slow) {
					t.Errorf("summarized run differs from full run:\n%+v\n%+v", fast, slow)
				}
			})
		}
	}
}

func TestReadTraceErrors(t *testing.T) {
	tests := []struct {
		name, trace, extra, want string
	}{
		{"empty", "", "", "t.csv: the trace has no jobs"},
		{"header only", GenericHeader + "\n", "", "t.csv: the trace has no jobs"},
		{"unknown header", "a,b,c\n1,2,3\n", "", `t.csv:1: unknown trace header "a,b,c"`},
		{"bad duration", GenericHeader + "\n0,10,1,\n5,ten,1,\n", "", `t.csv:3: duration: must be a number of seconds >= 0 (got "ten")`},
		{"bad instances", GenericHeader + "\n0,10,0,\n", "", `t.csv:2: instance_count: must be a whole number >= 1 (got "0")`},
		{"fields", GenericHeader + "\n0,10\n", "", "t.csv:2: want 3 or 4 fields"},
		{"philly time", phillyHeader + "\nyesterday,66.0,1,66.0,11cb48\n", "", `t.csv:2: timestamp: "yesterday" is not a time`},
		{"philly gpus", phillyHeader + "\n2017-10-09 07:01:55,66.0,x,66.0,11cb48\n", "", `t.csv:2: num_gpus: must be a whole number >= 1 (got "x")`},
		{"too many nodes", GenericHeader + "\n0,10,1,\n0,10,9,\n", "max_instances: 4\n", "t.csv:3: the job needs 9 nodes but max_instances is 4; raise it (--set max_instances=9)"},
		{"size does not fit", GenericHeader + "\n0,10,1,Standard_NC24ads_A100_v4\n", "max_instances: 4\n", "t.csv:2: size Standard_NC24ads_A100_v4 (24 vCPUs, 220 GB, 1 GPUs) does not fit a node of compute gpu-cluster"},
		{"unknown size", GenericHeader + "\n0,10,1,Standard_Nope\n", "max_instances: 4\n", `t.csv:2: size: unknown VM size "Standard_Nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace("t.csv", strings.NewReader(tc.trace))
			if err == nil {
				err = tr.Fit(compute(t, tc.extra), catalog.Default().Lookup)
				if err != nil && !errors.Is(err, ErrNoFit) {
					t.Errorf("Fit error %v does not wrap ErrNoFit", err)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestReadTraceFormats(t *testing.T) {
	philly := phillyHeader + "\n2017-10-09 07:01:55,66.0,8,528.0,11cb48\n2017-10-09 07:00:55,10.5,1,10.5,11cb48\n"
	tr, err := ReadTrace("p.csv", strings.NewReader(philly))
	if err != nil {
		t.Fatal(err)
	}
	// NC24ads_A100_v4 has one GPU; ND96asr_v4 has eight.
	for size, want := range map[string]int{"Standard_NC4as_T4_v3": 8, "Standard_ND96asr_v4": 1, "Standard_DS3_v2": 8} {
		c := compute(t, "max_instances: 8\n")
		c.Size = size
		if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
			t.Fatal(err)
		}
		if got := tr.Jobs[1].Instances; got != want {
			t.Errorf("%s: 8 GPUs need %d nodes, want %d", size, got, want)
		}
	}
	if tr.Jobs[0].Submit != 0 || tr.Jobs[1].Submit != time.Minute || tr.Jobs[0].Duration != 10500*time.Millisecond {
		t.Errorf("jobs not sorted by submit and shifted to 0: %+v", tr.Jobs)
	}
	gen := "# exported by tide\n" + GenericHeader + "\n2025-01-01T10:00:30Z,5,2,\n2025-01-01T10:00:00Z,5,1,Standard_NC4as_T4_v3\n"
	tr, err = ReadTrace("g.csv", strings.NewReader(gen))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != "generic" || tr.Jobs[1].Submit != 30*time.Second || tr.Jobs[1].Instances != 2 || tr.Jobs[0].Size != "Standard_NC4as_T4_v3" {
		t.Errorf("generic trace read as %+v", tr)
	}
}

func TestParseGoal(t *testing.T) {
	for in, want := range map[string]Goal{
		"mean wait under 60s":               {"mean", time.Minute},
		"P95 wait below 5m":                 {"p95", 5 * time.Minute},
		"p99 wait < 90 at least cost":       {"p99", 90 * time.Second},
		"mean wait under 60s at least cost": {"mean", time.Minute},
	} {
		got, err := ParseGoal(in)
		if err != nil || got != want {
			t.Errorf("ParseGoal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "mean wait under soon", "mean wait under 0s"} {
		if _, err := ParseGoal(bad); err == nil {
			t.Errorf("ParseGoal(%q): no error", bad)
		}
	}
}

// FuzzReadTrace checks that no trace crashes the reader or the simulation
// and that every error names the file.
func FuzzReadTrace(f *testing.F) {
	f.Add(GenericHeader + "\n0,10,1,\n5,20,2,Standard_NC4as_T4_v3\n")
	f.Add(phillyHeader + "\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n")
	f.Add("submit,duration,instance_count\n1e300,1e300,1\n")
	f.Add("submit,duration,instance_count\n1990-01-01T00:00:00Z,60,1\n2199-12-31T23:59:59Z,60,1\n")
	f.Add(alibabaHeader + "\np,88000,327680,8,1000,,LS,Running,0,3600,0\nq,1,1,1,1,,BE,Pending,5,9,\n")
	f.Fuzz(func(t *testing.T, text string) {
		tr, err := ReadTrace("f.csv", strings.NewReader(text))
		replayFuzzed(t, tr, err)
	})
}

// replayFuzzed checks what a fuzzed trace read gave: an error naming the
// file f.csv, or a trace that replays without error (when small enough and
// fitting a compute of 8 one-GPU nodes).
func replayFuzzed(t *testing.T, tr *Trace, err error) {
	t.Helper()
	if err != nil {
		if !strings.HasPrefix(err.Error(), "f.csv") && !strings.HasPrefix(err.Error(), "reading f.csv") {
			t.Fatalf("error %q does not name the file", err)
		}
		return
	}
	if len(tr.Jobs) > 50 {
		return
	}
	c := &api.Compute{Name: "gpu-cluster", Size: "Standard_NC4as_T4_v3", MaxInstances: 8, IdleTimeBeforeScaleDown: 120}
	if tr.Fit(c, catalog.Default().Lookup) != nil {
		return
	}
	size, _ := catalog.Default().Lookup(c.Size)
	if _, err := Run(tr, Config{Compute: *c, Size: size, BootTime: time.Minute}); err != nil {
		t.Fatal(err)
	}
}
