package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
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
// tests: Poisson, bursty, heavy-tailed durations, multi-node.
func generated(r *rand.Rand, n int) *Trace {
	tr := &Trace{File: "gen"}
	shape := r.IntN(4)
	at := time.Duration(0)
	for range n {
		gap := time.Duration(r.ExpFloat64() * float64(5*time.Minute))
		if shape == 1 && r.IntN(4) > 0 {
			gap = time.Duration(r.IntN(10)) * time.Second
		}
		at += gap
		d := time.Duration(30+r.IntN(3600)) * time.Second
		if shape == 2 {
			d = time.Duration(math.Min(30*math.Pow(1-r.Float64(), -1.2), 1e6)) * time.Second
		}
		inst := 1
		if shape == 3 && r.IntN(3) == 0 {
			inst = 2 << r.IntN(3)
		}
		tr.Jobs = append(tr.Jobs, Job{Submit: at, Duration: d, Instances: inst})
	}
	return tr
}

// TestProperties checks, over generated traces: busy hours equal the
// trace's job-hours (Run also refuses otherwise), idle hours do not fall
// as the idle time grows, and with a zero boot time and no cap no job
// waits and the adaptive policy keeps no idle node.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 23))
	for k := range 12 {
		tr := generated(r, 300)
		var jobHours float64
		for _, j := range tr.Jobs {
			jobHours += j.Duration.Hours() * float64(j.Instances)
		}
		prevIdle := -1.0
		for _, idle := range []int{0, 60, 120, 300, 900, 3600} {
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
	}
}

func TestReadAlibaba(t *testing.T) {
	text := alibabaHeader + `
openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
openb-pod-0022,4000,15258,1,220,,BE,Running,9679175,9973826,9679175
openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,
openb-pod-0048,8000,30517,0,0,,BE,Running,9992086,10013821,9992086
`
	tr, err := ReadTrace("openb_pod_list_default.csv", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != "alibaba" || tr.Skipped != 1 || len(tr.Jobs) != 3 {
		t.Fatalf("format %s, skipped %d, jobs %d: want alibaba, 1 skipped (never scheduled), 3 jobs", tr.Format, tr.Skipped, len(tr.Jobs))
	}
	first := tr.Jobs[0]
	if first.GPUs != 8 || first.Duration != (10769854-9437497)*time.Second || first.Submit != 0 {
		t.Errorf("first job = %+v", first)
	}
	if cpu := tr.Jobs[2]; cpu.GPUs != 1 || cpu.Submit != (9992086-9437497)*time.Second {
		t.Errorf("CPU-only pod = %+v: want one node, submit offset from the first", cpu)
	}
	c := compute(t, "max_instances: 100\n") // one T4 per node
	if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
		t.Fatal(err)
	}
	if tr.Jobs[0].Instances != 8 {
		t.Errorf("an 8-GPU pod on one-GPU nodes needs %d nodes, want 8", tr.Jobs[0].Instances)
	}
}

func TestReadTraceColumns(t *testing.T) {
	cols, err := ParseColumns("submit=queued_at, end=finished_at, start=started_at, gpus=gpu_count")
	if err != nil {
		t.Fatal(err)
	}
	text := "job,queued_at,started_at,finished_at,gpu_count\n" +
		"a,2024-05-01T10:00:00Z,2024-05-01T10:01:00Z,2024-05-01T11:01:00Z,2\n" +
		"\"b,quoted\",2024-05-01T10:00:30Z,,,1\n" +
		"c,2024-05-01T09:59:00Z,2024-05-01T09:59:00Z,2024-05-01T10:00:00Z,0\n"
	tr, err := ReadTraceColumns("mine.csv", strings.NewReader(text), cols, "columns")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 2 || tr.Skipped != 1 {
		t.Fatalf("jobs %d, skipped %d: want 2 and 1", len(tr.Jobs), tr.Skipped)
	}
	if !tr.Start.Equal(time.Date(2024, 5, 1, 9, 59, 0, 0, time.UTC)) || tr.Jobs[1].Submit != time.Minute || tr.Jobs[1].Duration != time.Hour || tr.Jobs[1].GPUs != 2 {
		t.Errorf("start %v, jobs %+v", tr.Start, tr.Jobs)
	}
	for _, bad := range []struct{ cols, want string }{
		{"duration=x", "submit=COLUMN is required"},
		{"submit=a", "duration=COLUMN, or end=COLUMN"},
		{"submit=a,duration=b,end=c", "not both"},
		{"submit=a,duration=b,colour=red", "unknown key colour"},
		{"submit", "want key=column"},
	} {
		if _, err := ParseColumns(bad.cols); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseColumns(%q) = %v, want an error with %q", bad.cols, err, bad.want)
		}
	}
	cols, _ = ParseColumns("submit=queued_at,duration=runtime")
	if _, err := ReadTraceColumns("mine.csv", strings.NewReader(text), cols, "columns"); err == nil || !strings.Contains(err.Error(), "duration=runtime: no such column") {
		t.Errorf("missing column: %v", err)
	}
	cols, _ = ParseColumns("submit=queued_at,end=finished_at,start=started_at")
	if _, err := ReadTraceColumns("mine.csv", strings.NewReader("queued_at,started_at,finished_at\n10,20,15\n"), cols, "columns"); err == nil || !strings.Contains(err.Error(), "mine.csv:2: end") {
		t.Errorf("end before start: %v", err)
	}
}
