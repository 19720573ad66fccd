package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/autoscaler"
)

// runTrace simulates a trace built in code (not read from text).
func runTrace(t *testing.T, tr *Trace, extra string, cfg Config) Result {
	t.Helper()
	return runOn(t, tr, compute(t, extra), cfg)
}

// TestNoOverflowAtBillionNodeHours: int64 nanoseconds wrap at about 2.5
// million node-hours; the totals must stay exact far beyond.
func TestNoOverflowAtBillionNodeHours(t *testing.T) {
	tr := &Trace{File: "big"}
	const jobs, hours = 1000, 1_000_000
	for i := range jobs {
		tr.Jobs = append(tr.Jobs, Job{Submit: time.Duration(i) * time.Second, Duration: hours * time.Hour, Instances: 1})
	}
	res := runTrace(t, tr, "max_instances: 100000\n", Config{BootTime: 180 * time.Second})
	want := float64(jobs * hours)
	if math.Abs(res.NodeHours.Busy-want) > 1e-6*want {
		t.Errorf("busy = %.1f node-hours, want %.1f", res.NodeHours.Busy, want)
	}
	if res.NodeHours.Total < res.NodeHours.Busy || res.Cost <= 0 {
		t.Errorf("total %.1f, cost %.2f: want total >= busy and a positive cost", res.NodeHours.Total, res.Cost)
	}
	// The clairvoyant reference adds up the same node time.
	if c := Clairvoyant(tr, 180*time.Second); math.Abs(c.Busy-want) > 1e-6*want || c.Total < c.Busy {
		t.Errorf("clairvoyant busy = %.1f node-hours (total %.1f), want %.1f", c.Busy, c.Total, want)
	}
}

// TestPreemptionsBoundedPerJob: with the docs' 0.1 preemptions per
// node-hour, a 10,000-hour job used to restart hundreds of thousands of
// times (and the totals wrapped negative). Retries bound it, as on the
// server.
func TestPreemptionsBoundedPerJob(t *testing.T) {
	tr := &Trace{File: "long", Jobs: []Job{
		{Submit: 0, Duration: 10_000 * time.Hour, Instances: 4},
		{Submit: time.Minute, Duration: time.Minute, Instances: 1},
	}}
	for _, retries := range []int{-1, 0, 5} {
		t.Run(fmt.Sprint(retries), func(t *testing.T) {
			res := runTrace(t, tr, "max_instances: 10\ntier: low_priority\n", Config{BootTime: time.Minute, PreemptionsPerHour: 0.1, Seed: 7, Retries: retries})
			allowed := retries
			switch retries {
			case 0:
				allowed = DefaultRetries
			case -1:
				allowed = 0
			}
			if res.Preemptions > allowed+1 {
				t.Errorf("%d preemptions, want at most %d (retries %d, then the job fails)", res.Preemptions, allowed+1, allowed)
			}
			if res.Failed != 1 {
				t.Errorf("failed = %d, want the long job failed", res.Failed)
			}
			if limit := float64((allowed+1)*4) * 10_000; res.NodeHours.Busy > limit {
				t.Errorf("busy %.0f node-hours, more than %d attempts of the job can use", res.NodeHours.Busy, allowed+1)
			}
		})
	}
}

// generated returns a random trace of one of several shapes, for property
// tests: Poisson, bursty, heavy-tailed durations, multi-node, bursts of
// gangs.
func generated(r *rand.Rand, n int) *Trace {
	tr := &Trace{File: "gen"}
	shape := r.IntN(5) // 4: bursts of gangs and one-node jobs
	at := time.Duration(0)
	for range n {
		gap := time.Duration(r.ExpFloat64() * float64(5*time.Minute))
		if (shape == 1 || shape == 4) && r.IntN(4) > 0 {
			gap = time.Duration(r.IntN(10)) * time.Second
		}
		at += gap
		d := time.Duration(30+r.IntN(3600)) * time.Second
		if shape == 2 {
			d = time.Duration(math.Min(30*math.Pow(1-r.Float64(), -1.2), 1e6)) * time.Second
		}
		inst := 1
		if (shape == 3 || shape == 4) && r.IntN(3) == 0 {
			inst = 2 << r.IntN(3)
		}
		tr.Jobs = append(tr.Jobs, Job{Submit: at, Duration: d, Instances: inst})
	}
	return tr
}

// traceJobHours is the node time the trace's jobs run, in hours.
func traceJobHours(tr *Trace) float64 {
	var h float64
	for _, j := range tr.Jobs {
		h += j.Duration.Hours() * float64(j.Instances)
	}
	return h
}

// TestProperties checks, over generated traces of every shape: busy hours
// equal the trace's job-hours (Run also refuses otherwise), idle hours do
// not fall as the idle time grows, and with a zero boot time and no cap no
// job waits and the adaptive policy keeps no idle node; with no cap no job
// waits longer than the boot time (a gang keeps the idle nodes it holds,
// even when booting nodes make a surplus). Under a node cap a
// gang holds the free nodes until enough are free, so idle time remains even
// with a zero boot time: there the adaptive policy must do exactly what a
// zero idle time does. Monotonicity is not claimed under a cap: a longer
// idle time changes which jobs wait, and so which gangs hold nodes.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 23))
	for k := range 24 {
		tr := generated(r, 150+r.IntN(250))
		jobHours := traceJobHours(tr)
		prevIdle := -1.0
		for _, idle := range []int{0, 30, 60, 120, 300, 600, 900, 1800, 3600} {
			res := runTrace(t, tr, fmt.Sprintf("max_instances: 1000\nidle_time_before_scale_down: %d\n", idle), Config{BootTime: 180 * time.Second})
			if math.Abs(res.NodeHours.Busy-jobHours) > 1e-6*jobHours {
				t.Errorf("trace %d idle %d: busy %.4f, trace's job-hours %.4f", k, idle, res.NodeHours.Busy, jobHours)
			}
			if res.NodeHours.Idle < prevIdle-1e-9 {
				t.Errorf("trace %d: idle hours fell from %.4f to %.4f as the idle time grew to %d s", k, prevIdle, res.NodeHours.Idle, idle)
			}
			prevIdle = res.NodeHours.Idle
		}
		for _, policy := range []string{autoscaler.DefaultPolicy, autoscaler.AdaptivePolicy} {
			res := runTrace(t, tr, "max_instances: 1000\n", Config{Policy: policy})
			if res.Wait.Mean != 0 || res.Wait.P99 != 0 {
				t.Errorf("trace %d %s: waits %+v with a zero boot time and no cap", k, policy, res.Wait)
			}
			if policy == autoscaler.AdaptivePolicy && res.NodeHours.Idle != 0 {
				t.Errorf("trace %d: adaptive kept %.3f idle node-hours with a zero boot time", k, res.NodeHours.Idle)
			}
		}
		for _, policy := range []string{autoscaler.DefaultPolicy, autoscaler.AdaptivePolicy} {
			res := runTrace(t, tr, "max_instances: 1000\nidle_time_before_scale_down: 0\n", Config{Policy: policy, BootTime: 180 * time.Second})
			if res.MaxWait > 180 {
				t.Errorf("trace %d %s: a job waited %.0f s, longer than the 180 s boot time, with no cap", k, policy, res.MaxWait)
			}
		}
		adaptive := runTrace(t, tr, "max_instances: 12\n", Config{Policy: autoscaler.AdaptivePolicy})
		zero := runTrace(t, tr, "max_instances: 12\nidle_time_before_scale_down: 0\n", Config{Policy: autoscaler.DefaultPolicy})
		if adaptive.NodeHours != zero.NodeHours || adaptive.Wait != zero.Wait {
			t.Errorf("trace %d, 12 nodes, zero boot time: adaptive %+v %+v, idle time 0 %+v %+v; want the same", k, adaptive.NodeHours, adaptive.Wait, zero.NodeHours, zero.Wait)
		}
	}
}

// TestFaultsKeepTotalsPossible replays generated traces with boot failures
// and preemptions at random rates, up to one per node-hour: every run must
// pass Run's checks (no total above peak nodes for the wall-clock time, none
// negative), no job is preempted more than its retries allow, and the busy
// time is at most what every allowed attempt of every job could use.
func TestFaultsKeepTotalsPossible(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 23))
	for k := range 16 {
		tr := generated(r, 100+r.IntN(200))
		jobHours := traceJobHours(tr)
		retries := r.IntN(4)
		cfg := Config{BootTime: time.Duration(r.IntN(300)) * time.Second, BootFailureRate: r.Float64() / 2,
			PreemptionsPerHour: r.Float64(), Retries: retries, Seed: uint64(k)}
		if retries == 0 {
			cfg.Retries = -1
		}
		res := runTrace(t, tr, fmt.Sprintf("max_instances: %d\ntier: low_priority\n", 8+r.IntN(100)), cfg)
		if res.Preemptions > (retries+1)*len(tr.Jobs) || res.Failed > len(tr.Jobs) {
			t.Errorf("trace %d: %d preemptions, %d failed of %d jobs with %d retries", k, res.Preemptions, res.Failed, len(tr.Jobs), retries)
		}
		if limit := float64(retries+1) * jobHours; res.NodeHours.Busy > limit*(1+1e-9) {
			t.Errorf("trace %d: busy %.3f node-hours, more than %d attempts of every job (%.3f)", k, res.NodeHours.Busy, retries+1, limit)
		}
	}
}

// TestImpossibleTotalsAreErrors: a result no replay can produce is refused
// as the simulator's bug, whatever figure is wrong.
func TestImpossibleTotalsAreErrors(t *testing.T) {
	tr := &Trace{File: "t", Jobs: []Job{{Duration: time.Hour, Instances: 2}}}
	c := compute(t, "max_instances: 4\n")
	good := Result{Jobs: 1, NodeHours: NodeHours{Busy: 2, Idle: 1, Total: 3}, Cost: 1, PeakNodes: 2, Horizon: 2}
	if err := good.check(tr, Config{Compute: *c}); err != nil {
		t.Fatalf("a possible result was refused: %v", err)
	}
	for name, bad := range map[string]func(*Result){
		"negative busy":    func(r *Result) { r.NodeHours.Busy, r.NodeHours.Total = -2, -1 },
		"negative cost":    func(r *Result) { r.Cost = -1 },
		"NaN wait":         func(r *Result) { r.Wait.Mean = math.NaN() },
		"above peak×wall":  func(r *Result) { r.NodeHours.Idle, r.NodeHours.Total = 3, 5 },
		"above max nodes":  func(r *Result) { r.PeakNodes = 5 },
		"wait beyond wall": func(r *Result) { r.MaxWait = 3 * 3600 },
		"busy not trace":   func(r *Result) { r.NodeHours.Busy, r.NodeHours.Idle = 1, 2 },
	} {
		r := good
		bad(&r)
		if err := r.check(tr, Config{Compute: *c}); !errors.Is(err, ErrSimulatorBug) {
			t.Errorf("%s: check = %v, want ErrSimulatorBug", name, err)
		}
	}
}

// TestTraceTimesStayInRange: times outside 1970-2200, or a trace spanning
// more than ten years, would wrap time.Duration and make every total
// meaningless; they are refused naming the line.
func TestTraceTimesStayInRange(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"submit,duration,instance_count\n1900-01-01T00:00:00Z,60,1\n", "f.csv:2: submit: 1900-01-01T00:00:00Z is not between 1970 and 2200"},
		{"submit,duration,instance_count\n2000-01-01T00:00:00Z,60,1\n2199-01-01T00:00:00Z,60,1\n", "f.csv:3: submit: the trace spans 199 years from line 2 to line 3"},
		{"submit,duration,instance_count\n0,60,1\n300000000,60,1\n", ""},
		{"timestamp,duration,num_gpus,gpu_time,cluster\n1969-12-31 23:59:59,60,1,60,a\n", "f.csv:2: submit: 1969-12-31T23:59:59Z is not between"},
	} {
		_, err := ReadTrace("f.csv", strings.NewReader(c.text))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ReadTrace(%q) = %v, want %q", c.text, err, c.want)
		}
	}
	cols, _ := ParseColumns("submit=q,start=s,end=e")
	for _, c := range []struct{ text, want string }{
		{"q,s,e\n2000-01-01T00:00:00Z,2000-01-01T00:00:00Z,2150-01-01T00:00:00Z\n", "f.csv:2: end: 2150-01-01T00:00:00Z is more than ten years after the start"},
		{"q,s,e\n2300-01-01T00:00:00Z,2300-01-01T00:00:00Z,2300-01-01T01:00:00Z\n", "f.csv:2: submit: 2300-01-01T00:00:00Z is not between 1970 and 2200"},
	} {
		_, err := ReadTraceColumns("f.csv", strings.NewReader(c.text), cols, "columns")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadTraceColumns(%q) = %v, want %q", c.text, err, c.want)
		}
	}
}

// TestMaxStartingNodes: tide.max_starting_nodes caps the nodes booting at
// once in the replay as on the server (it was ignored): six jobs submitted
// together on a cap of two start two by two, a boot apart.
func TestMaxStartingNodes(t *testing.T) {
	tr := &Trace{File: "burst"}
	for range 6 {
		tr.Jobs = append(tr.Jobs, Job{Duration: time.Hour, Instances: 1})
	}
	res := runTrace(t, tr, "max_instances: 10\ntide:\n  max_starting_nodes: 2\n", Config{BootTime: 100 * time.Second})
	if res.Wait.Mean != 200 || res.MaxWait != 300 || res.PeakNodes != 6 {
		t.Errorf("mean wait %.0f s, longest %.0f s, peak %d nodes: want 200 s, 300 s and 6 (two nodes booting at a time)", res.Wait.Mean, res.MaxWait, res.PeakNodes)
	}
}
