package sweep

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

func parse(t testing.TB, y string) *api.Job {
	t.Helper()
	j, err := spec.ParseJob("s.yml", []byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

const allDists = `type: sweep
trial:
  command: >-
    train --c ${{search_space.c}} --r ${{search_space.r}} --u ${{search_space.u}} --lu ${{search_space.lu}}
    --qu ${{search_space.qu}} --qlu ${{search_space.qlu}} --n ${{search_space.n}} --ln ${{search_space.ln}}
    --qn ${{search_space.qn}} --qln ${{search_space.qln}} --in ${{inputs.a}}
inputs:
  a: 1
search_space:
  c: choice("x", "y", "z")
  r: randint(4)
  u: uniform(0.5, 1.5)
  lu: loguniform(-4, -1)
  qu: quniform(0, 10, 2)
  qlu: qloguniform(0, 3, 0.5)
  n: normal(10, 2)
  ln: lognormal(0, 0.5)
  qn: qnormal(100, 10, 5)
  qln: qlognormal(1, 0.5, 0.25)
sampling_algorithm: {type: random, seed: 7}
objective: {primary_metric: acc, goal: maximize}
limits: {max_total_trials: 500}
`

func TestRandomSampling(t *testing.T) {
	s := parse(t, allDists)
	num := func(p map[string]string, k string) float64 {
		v, err := strconv.ParseFloat(p[k], 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", k, p[k], err)
		}
		return v
	}
	multiple := func(v, q float64) bool { return math.Abs(v/q-math.Round(v/q)) < 1e-9 }
	var us, ns []float64
	seen := map[string]bool{}
	for i := range 500 {
		p := Next(s, i, nil, nil)
		if again := Next(s, i, nil, nil); FormatParams(again) != FormatParams(p) {
			t.Fatalf("trial %d: %v then %v: random sampling must depend on the seed and index only", i, p, again)
		}
		seen[p["c"]] = true
		if r := num(p, "r"); r < 0 || r > 3 || r != math.Trunc(r) || strings.Contains(p["r"], ".") {
			t.Errorf("randint(4) gave %q", p["r"])
		}
		u := num(p, "u")
		us = append(us, u)
		if u < 0.5 || u >= 1.5 {
			t.Errorf("uniform(0.5, 1.5) gave %g", u)
		}
		if lu := num(p, "lu"); lu < math.Exp(-4) || lu > math.Exp(-1) {
			t.Errorf("loguniform(-4, -1) gave %g, outside [e^-4, e^-1]", lu)
		}
		if qu := num(p, "qu"); qu < 0 || qu > 10 || !multiple(qu, 2) || strings.Contains(p["qu"], ".") {
			t.Errorf("quniform(0, 10, 2) gave %q", p["qu"])
		}
		if qlu := num(p, "qlu"); qlu < 1 || qlu > math.Exp(3)+0.25 || !multiple(qlu, 0.5) {
			t.Errorf("qloguniform(0, 3, 0.5) gave %q", p["qlu"])
		}
		ns = append(ns, num(p, "n"))
		if ln := num(p, "ln"); ln <= 0 {
			t.Errorf("lognormal gave %g <= 0", ln)
		}
		if qn := num(p, "qn"); !multiple(qn, 5) {
			t.Errorf("qnormal(100, 10, 5) gave %q", p["qn"])
		}
		if qln := num(p, "qln"); qln < 0 || !multiple(qln, 0.25) || len(p["qln"]) > 6 {
			t.Errorf("qlognormal(1, 0.5, 0.25) gave %q", p["qln"])
		}
		if p["a"] != "" {
			t.Errorf("inputs are not parameters: %v", p)
		}
	}
	if len(seen) != 3 {
		t.Errorf("choice drew %v of 3 values in 500 trials", seen)
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	if m := mean(us); math.Abs(m-1) > 0.05 {
		t.Errorf("uniform(0.5, 1.5) mean %g, want about 1", m)
	}
	if m := mean(ns); math.Abs(m-10) > 0.3 {
		t.Errorf("normal(10, 2) mean %g, want about 10", m)
	}
	other := *s
	seed := int64(8)
	other.Sampling = &api.Sampling{Type: api.SamplingRandom, Seed: &seed}
	if FormatParams(Next(&other, 0, nil, nil)) == FormatParams(Next(s, 0, nil, nil)) {
		t.Errorf("another seed drew the same trial")
	}
}

func TestFormat(t *testing.T) {
	q := func(v float64) api.SearchDist { return api.SearchDist{Type: api.DistQuniform, Q: &v} }
	for _, tt := range []struct {
		sd   api.SearchDist
		x    float64
		want string
	}{
		{q(1), 2.6, "3"},
		{q(0.1), 0.30000000000000004, "0.3"},
		{q(0.25), 1.1, "1"},
		{q(0.25), 1.2, "1.25"},
		{q(5), -1, "0"},
		{api.SearchDist{Type: api.DistUniform}, 0.000012, "0.000012"},
	} {
		if got := Format(tt.sd, tt.x); got != tt.want {
			t.Errorf("Format(q=%v, %v) = %q, want %q", tt.sd.Q, tt.x, got, tt.want)
		}
	}
}

func TestGrid(t *testing.T) {
	s := parse(t, `type: sweep
trial: {command: "t ${{search_space.b}} ${{search_space.a}}"}
search_space:
  a: {type: choice, values: [x, y]}
  b: randint(3)
sampling_algorithm: grid
objective: {primary_metric: acc, goal: maximize}
`)
	var got []string
	for i := 0; ; i++ {
		p := Next(s, i, nil, nil)
		if p == nil {
			break
		}
		got = append(got, FormatParams(p))
	}
	want := []string{"a=x b=0", "a=x b=1", "a=x b=2", "a=y b=0", "a=y b=1", "a=y b=2"}
	if !slices.Equal(got, want) {
		t.Errorf("grid = %v, want %v", got, want)
	}
	if spec.SweepMaxTrials(s) != 6 {
		t.Errorf("max trials %d, want the grid's 6", spec.SweepMaxTrials(s))
	}
}

func TestTrialJob(t *testing.T) {
	s := parse(t, allDists)
	s.Name, s.DisplayName = "sw", "sw"
	s.Limits.TrialTimeout = 60
	p := Next(s, 3, nil, nil)
	j := TrialJob(s, 3, p)
	if strings.Contains(j.Command, "search_space") || !strings.Contains(j.Command, "--c "+p["c"]+" ") || !strings.Contains(j.Command, "--in ${{inputs.a}}") {
		t.Errorf("command = %q", j.Command)
	}
	if j.Parent != "sw" || j.Inputs["a"].Value != "1" || j.Limits.Timeout != 60 || j.Parameters["qn"] != p["qn"] || j.DisplayName != "sw trial 3" {
		t.Errorf("job = %+v", j)
	}
	if err := spec.ValidateJob(j); err != nil {
		t.Errorf("a trial is a valid command job: %v", err)
	}
}

// trials builds a sweep with trials in the given statuses; metric series
// are by trial index.
func sweepOf(t *testing.T, extra string, statuses ...string) *api.Job {
	s := parse(t, `type: sweep
trial: {command: "t ${{search_space.x}}"}
search_space:
  x: uniform(0, 1)
sampling_algorithm: random
objective: {primary_metric: acc, goal: maximize}
limits: {max_total_trials: 6, max_concurrent_trials: 2}
`+extra)
	s.Name, s.Status, s.StartTime = "sw", api.JobRunning, time.Unix(1000, 0)
	for i, st := range statuses {
		s.Trials = append(s.Trials, api.SweepTrial{Index: i, Job: "sw_" + strconv.Itoa(i), Status: st})
	}
	return s
}

func withMetrics(s *api.Job, series map[int][]float64) map[int][]float64 {
	for i := range s.Trials {
		if xs := series[i]; len(xs) > 0 {
			s.Trials[i].Reports, s.Trials[i].Metric = len(xs), &xs[len(xs)-1]
		}
	}
	return series
}

func TestDecide(t *testing.T) {
	now := time.Unix(2000, 0)
	r, c, f := api.JobRunning, api.JobCompleted, api.JobFailed
	tests := []struct {
		name     string
		extra    string
		statuses []string
		series   map[int][]float64
		cancel   bool
		want     string // start|stopped trials|status|error contains
	}{
		{"first trials", "", nil, nil, false, "2|||"},
		{"within concurrency", "", []string{r, c}, map[int][]float64{1: {0.5}}, false, "1|||"},
		{"at the total", "", []string{c, c, c, c, c, r}, map[int][]float64{0: {0.1}}, false, "0|||"},
		{"completes with a best", "", []string{c, c, c, c, f, c}, map[int][]float64{0: {0.1}, 3: {0.9}}, false, "0||Completed|"},
		{"all failed", "", []string{f, f, f, f, f, f}, nil, false, "0||Failed|no trial completed with primary metric acc (trials: 6 failed)"},
		{"no metric after 3", "", []string{c, c, c, r}, nil, false, "0|3||completed without logging the primary metric acc"},
		{"no metric fails", "", []string{c, c, c, api.JobCanceled}, nil, false, "0||Failed|trials sw_0, sw_1, sw_2 completed without logging the primary metric acc"},
		{"two without metric go on", "", []string{c, c}, nil, false, "2|||"},
		{"cancel cascades", "", []string{r, api.JobQueued, c}, nil, true, "0|0 1||"},
		{"canceled", "", []string{api.JobCanceled, c}, nil, true, "0||Canceled|"},
		{"timeout", "timeout", []string{r, c}, map[int][]float64{1: {0.2}}, false, "0|0||"},
		{"timeout ends", "timeout", []string{api.JobCanceled, c}, map[int][]float64{1: {0.2}}, false, "0||Completed|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sweepOf(t, "", tt.statuses...)
			if tt.extra == "timeout" {
				s.Limits.Timeout = 500
			}
			if tt.cancel {
				s.Status = api.JobCancelRequested
			}
			d := Decide(s, withMetrics(s, tt.series), now)
			var stopped []string
			for _, st := range d.Stop {
				stopped = append(stopped, strconv.Itoa(st.Index))
			}
			got := strings.Join([]string{strconv.Itoa(d.Start), strings.Join(stopped, " "), d.Status}, "|")
			cut := strings.LastIndex(tt.want, "|")
			want, wantErr := tt.want[:cut], tt.want[cut+1:]
			if got != want || !strings.Contains(d.Error, wantErr) || (wantErr == "" && d.Error != "") {
				t.Errorf("Decide = %q error %q, want %q", got, d.Error, tt.want)
			}
		})
	}
}

func TestBestAndRank(t *testing.T) {
	s := sweepOf(t, "", api.JobCompleted, api.JobCanceled, api.JobCompleted, api.JobFailed)
	withMetrics(s, map[int][]float64{0: {0.5, 0.7}, 1: {0.9}, 2: {0.8}})
	if b := Best(s.Trials, api.GoalMaximize); b != 2 {
		t.Errorf("best = %d, want 2 (the canceled trial's 0.9 is not a result)", b)
	}
	if r := Rank(s.Trials, api.GoalMaximize); !slices.Equal(r, []int{1, 2, 0, 3}) {
		t.Errorf("rank = %v", r)
	}
	if r := Rank(s.Trials, api.GoalMinimize); !slices.Equal(r, []int{0, 2, 1, 3}) {
		t.Errorf("rank (minimize) = %v", r)
	}
	if b := Best(s.Trials, api.GoalMinimize); b != 0 {
		t.Errorf("best (minimize) = %d", b)
	}
}

func TestEarlyTermination(t *testing.T) {
	r, c := api.JobRunning, api.JobCompleted
	tests := []struct {
		name     string
		policy   string
		goal     string
		statuses []string
		series   map[int][]float64
		want     []int // stopped
		reason   string
	}{
		{"bandit factor", "{type: bandit, slack_factor: 0.2}", "maximize", []string{c, r, r},
			map[int][]float64{0: {0.5, 0.8}, 1: {0.4, 0.6}, 2: {0.7, 0.7}}, []int{1}, "bandit policy at interval 2: its best 0.6 is worse than 0.6667 (best 0.8 / (1+0.2))"},
		{"bandit amount minimize", "{type: bandit, slack_amount: 0.1}", "minimize", []string{c, r, r},
			map[int][]float64{0: {1.0, 0.5}, 1: {1.0, 0.65}, 2: {0.9, 0.55}}, []int{1}, "best 0.5 + 0.1"},
		{"bandit waits for delay_evaluation", "{type: bandit, slack_factor: 0.2, delay_evaluation: 3}", "maximize", []string{c, r},
			map[int][]float64{0: {0.9, 0.9, 0.9}, 1: {0.1, 0.1}}, nil, ""},
		{"bandit after delay", "{type: bandit, slack_factor: 0.2, delay_evaluation: 3}", "maximize", []string{c, r},
			map[int][]float64{0: {0.9, 0.9, 0.9}, 1: {0.1, 0.1, 0.1}}, []int{1}, "at interval 3"},
		{"bandit evaluation interval", "{type: bandit, slack_factor: 0.2, evaluation_interval: 2}", "maximize", []string{c, r},
			map[int][]float64{0: {0.9, 0.9, 0.9}, 1: {0.9, 0.9, 0.1}}, nil, ""},
		{"bandit compares at the interval", "{type: bandit, slack_factor: 0.2}", "maximize", []string{r, r},
			map[int][]float64{0: {0.3, 0.9}, 1: {0.3}}, nil, ""},
		{"median", "{type: median_stopping}", "maximize", []string{c, c, r, r},
			map[int][]float64{0: {0.6, 0.8}, 1: {0.4, 0.6}, 2: {0.2, 0.3}, 3: {0.7, 0.9}}, []int{2}, "median stopping policy at interval 2: its best 0.3 is worse than the median 0.7 of the other 3 trials' running averages"},
		{"truncation", "{type: truncation_selection, truncation_percentage: 25}", "maximize", []string{c, r, r, r},
			map[int][]float64{0: {0.9}, 1: {0.2}, 2: {0.5}, 3: {0.6}}, []int{1}, "truncation selection at interval 1: its value 0.2 is in the worst 25% of 4 trials"},
		{"truncation excludes finished", "{type: truncation_selection, truncation_percentage: 34, exclude_finished_jobs: true}", "minimize", []string{c, r, r, r},
			map[int][]float64{0: {9}, 1: {0.2}, 2: {0.5}, 3: {0.6}}, []int{3}, "worst 34% of 3 trials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sweepOf(t, "early_termination: "+tt.policy+"\n", tt.statuses...)
			s.Objective.Goal = tt.goal
			d := Decide(s, withMetrics(s, tt.series), time.Unix(1500, 0))
			var got []int
			for _, st := range d.Stop {
				got = append(got, st.Index)
				if !st.Early || !strings.Contains(st.Reason, tt.reason) {
					t.Errorf("stop %+v, want a reason with %q", st, tt.reason)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("stopped %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEarlyTerminationSavesWork runs a simulated sweep in which a trial's
// curve rises towards its quality: a bandit policy stops the poor trials
// early and keeps the best.
func TestEarlyTerminationSavesWork(t *testing.T) {
	s := sweepOf(t, "early_termination: {type: bandit, slack_factor: 0.1, delay_evaluation: 2}\n")
	s.Limits.MaxTotalTrials, s.Limits.MaxConcurrentTrials = 20, 4
	const steps = 10
	quality := func(p map[string]string) float64 { x, _ := strconv.ParseFloat(p["x"], 64); return x }
	series := map[int][]float64{}
	now := time.Unix(1000, 0)
	for turn := 0; turn < 1000 && s.Status == api.JobRunning; turn++ {
		for i := range s.Trials {
			tr := &s.Trials[i]
			if tr.Status == api.JobCancelRequested {
				tr.Status = api.JobCanceled
			}
			if tr.Status != api.JobRunning {
				continue
			}
			k := len(series[tr.Index])
			if k == steps {
				tr.Status = api.JobCompleted
				continue
			}
			series[tr.Index] = append(series[tr.Index], quality(tr.Parameters)*(1-math.Pow(0.7, float64(k+1))))
		}
		withMetrics(s, series)
		d := Decide(s, series, now)
		for _, st := range d.Stop {
			s.Trials[st.Index].Status, s.Trials[st.Index].Stopped = api.JobCancelRequested, st.Reason
		}
		for range d.Start {
			i := len(s.Trials)
			s.Trials = append(s.Trials, api.SweepTrial{Index: i, Job: "sw_" + strconv.Itoa(i), Status: api.JobRunning, Parameters: Next(s, i, nil, nil)})
		}
		if d.Status != "" {
			s.Status = d.Status
		}
	}
	if s.Status != api.JobCompleted {
		t.Fatalf("status %s", s.Status)
	}
	stopped, work, best := 0, 0, 0.0
	for _, tr := range s.Trials {
		work += tr.Reports
		if tr.Stopped != "" {
			stopped++
			if tr.Reports >= steps {
				t.Errorf("trial %d stopped after all %d steps", tr.Index, tr.Reports)
			}
		}
		best = max(best, quality(tr.Parameters))
	}
	b := s.Trials[Best(s.Trials, api.GoalMaximize)]
	if stopped < 5 || work >= 20*steps*3/4 || quality(b.Parameters) < best-1e-9 {
		t.Errorf("%d of 20 trials stopped, %d of %d steps run, best kept %v (best drawn %g)", stopped, work, 20*steps, b.Parameters, best)
	}
}
