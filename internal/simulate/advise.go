package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
)

// adviseCoarse are the idle times (seconds) Advise's search starts from;
// it then bisects, in adviseStep steps, between the longest that misses the
// goal and the shortest that meets it.
var adviseCoarse = []int{0, 60, 120, 300, 600, 1200, 1800, 2700, 3600}

// adviseStep is the resolution of the idle-time search, in seconds.
const adviseStep = 30

// adviseMins are the min_instances values Advise tries, as far as
// max_instances allows.
var adviseMins = []int{1, 2, 4, 8}

// adviseStarting are the tide.max_starting_nodes caps Advise tries on the
// cheapest setting that meets the goal, as far as max_instances allows.
var adviseStarting = []int{1, 2, 4, 8, 16, 32}

// holdoutShare is the part of a trace, by time, that Advise keeps out of
// the search to check the recommendation on; holdoutMinJobs is the fewest
// jobs a trace needs for that split to be worth making.
const (
	holdoutShare   = 1.0 / 3
	holdoutMinJobs = 300
)

// Goal is what a recommendation must meet: a wait statistic under a bound,
// at the least cost.
type Goal struct {
	// Stat is "mean", "p50", "p95" or "p99".
	Stat string
	// Under is the bound the statistic must stay below.
	Under time.Duration
}

func (g Goal) String() string {
	return fmt.Sprintf("%s wait under %ss", g.Stat, strconv.FormatFloat(g.Under.Seconds(), 'f', -1, 64))
}

// wait returns the goal's statistic of r.
func (g Goal) wait(r Result) float64 {
	switch g.Stat {
	case "p50":
		return r.Wait.P50
	case "p95":
		return r.Wait.P95
	case "p99":
		return r.Wait.P99
	}
	return r.Wait.Mean
}

var goalRE = regexp.MustCompile(`^(mean|p50|p95|p99)\s+wait\s+(?:under|below|<)\s+(\S+)(?:\s+at\s+least\s+cost)?$`)

// ParseGoal parses a goal like "mean wait under 60s" or "p95 wait under
// 5m" (a plain number is seconds).
func ParseGoal(s string) (Goal, error) {
	m := goalRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return Goal{}, fmt.Errorf("goal %q: want \"STAT wait under DURATION\" with STAT mean, p50, p95 or p99, e.g. \"mean wait under 60s\"", s)
	}
	d, err := time.ParseDuration(m[2])
	if err != nil {
		n, nerr := strconv.ParseFloat(m[2], 64)
		if nerr != nil {
			return Goal{}, fmt.Errorf("goal %q: %q is not a duration like 60s or 5m", s, m[2])
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d <= 0 {
		return Goal{}, fmt.Errorf("goal %q: the bound must be > 0", s)
	}
	return Goal{Stat: m[1], Under: d}, nil
}

// Candidate is one setting Advise tried.
type Candidate struct {
	// Setting describes it, e.g. "fixed idle 300s, min 0".
	Setting string `json:"setting"`
	// Policy, IdleTime, MinInstances and MaxStartingNodes are the compute
	// settings (for the adaptive policy, IdleTime is its reference).
	Policy           string `json:"policy"`
	IdleTime         int    `json:"idle_time_before_scale_down"`
	MinInstances     int    `json:"min_instances"`
	MaxStartingNodes int    `json:"max_starting_nodes"`
	// Result is what the simulation measured.
	Result Result `json:"result"`
	// Frontier is set when no other candidate is at least as cheap and at
	// least as fast (on the goal's statistic) and better in one.
	Frontier bool `json:"frontier"`
}

// Advice is the outcome of Advise.
type Advice struct {
	// Goal is the goal recommended for.
	Goal string `json:"goal"`
	// Fit describes the part of the trace the settings were searched on.
	Fit string `json:"fit"`
	// Candidates are all settings tried, on the fit part, cheapest first.
	Candidates []Candidate `json:"candidates"`
	// Recommended indexes Candidates: the cheapest that meets the goal,
	// or the fastest when none does.
	Recommended int `json:"recommended"`
	// Met says whether the recommendation meets the goal on the fit part.
	Met bool `json:"met"`
	// Holdout is the recommendation replayed on the last part of the
	// trace, which the search never saw; nil when the trace is too short
	// to split.
	Holdout *Holdout `json:"holdout,omitempty"`
	// Confidence is "high" (the goal holds on the holdout with a 10 %
	// margin and in each of its windows), "medium" (it holds on the
	// holdout), "low" (it does not) or "untested" (no holdout).
	Confidence string `json:"confidence"`
}

// Holdout is the recommended setting's result on the held-out part.
type Holdout struct {
	Jobs   int    `json:"jobs"`
	Result Result `json:"result"`
	Met    bool   `json:"met"`
	// Windows is the goal's statistic, in seconds, over the jobs
	// submitted in each of holdoutWindows equal spans of the held-out
	// part's time, in order; WindowsMet counts those under the goal. A
	// goal met overall but not in every window is met on average only.
	Windows    []float64 `json:"windows"`
	WindowsMet int       `json:"windows_met"`
}

// holdoutWindows is the number of spans the held-out part is judged in.
const holdoutWindows = 3

// Advise searches the compute's settings for the cheapest that meets goal:
// the idle time, from a coarse grid refined by bisection to 30 s (cost
// grows and waits fall with the idle time, so the cheapest setting that
// meets a wait goal sits where the goal starts to hold), min_instances at
// the idle times around it, the adaptive policy with those idle times and
// the file's as its reference, and tide.max_starting_nodes caps on the
// cheapest setting that meets the goal. It searches on the
// first two thirds of the trace and replays the recommendation on the last
// third, which it never saw, to say how far to trust it.
func Advise(trace *Trace, base Config, goal Goal) (Advice, error) {
	fit, hold := trace, (*Trace)(nil)
	if len(trace.Jobs) >= holdoutMinJobs {
		fit, hold = trace.Split(1 - holdoutShare)
	}
	a := &adviser{trace: fit, base: base, goal: goal, tried: map[setting]int{}}
	c := &base.Compute
	file := c.IdleTimeBeforeScaleDown
	coarse := slices.Clone(adviseCoarse)
	if !slices.Contains(coarse, file) {
		coarse = append(coarse, file)
		slices.Sort(coarse)
	}
	for _, idle := range coarse {
		a.want(autoscaler.DefaultPolicy, idle, c.MinInstances)
	}
	start := c.MaxStartingNodes()
	// The adaptive policy, unless the caller's registry leaves it out.
	_, adaptive := base.Policies[autoscaler.AdaptivePolicy]
	adaptive = adaptive || base.Policies == nil
	if adaptive {
		a.want(autoscaler.AdaptivePolicy, file, c.MinInstances)
	}
	if err := a.run(); err != nil {
		return Advice{}, err
	}
	// Bisect between the longest coarse idle time that misses the goal
	// and the next, which meets it.
	lo, hi := -1, -1
	for _, idle := range coarse {
		if a.meets(autoscaler.DefaultPolicy, idle, c.MinInstances) {
			hi = idle
			break
		}
		lo = idle
	}
	if lo >= 0 && hi > 0 {
		for hi-lo > adviseStep {
			mid := (lo + hi) / 2 / adviseStep * adviseStep
			if mid <= lo {
				mid = lo + adviseStep
			}
			a.want(autoscaler.DefaultPolicy, mid, c.MinInstances)
			if err := a.run(); err != nil {
				return Advice{}, err
			}
			if a.meets(autoscaler.DefaultPolicy, mid, c.MinInstances) {
				hi = mid
			} else {
				lo = mid
			}
		}
	}
	// Warm nodes may let a shorter idle time meet the goal.
	for _, m := range adviseMins {
		if m == c.MinInstances || m > c.MaxInstances {
			continue
		}
		for _, idle := range []int{max(lo, 0), max(hi, 0), file} {
			a.want(autoscaler.DefaultPolicy, idle, m)
		}
	}
	// The adaptive policy's knob is its reference, the idle time it must
	// do at least as well as: the idle times on both sides of the goal.
	for _, idle := range []int{max(lo, 0), max(hi, 0)} {
		if adaptive {
			a.want(autoscaler.AdaptivePolicy, idle, c.MinInstances)
		}
	}
	if err := a.run(); err != nil {
		return Advice{}, err
	}
	// A cap on nodes starting at once boots fewer spare nodes in a burst
	// and makes its jobs wait longer: try caps on the cheapest setting
	// that meets the goal (the fastest when none does).
	if best := a.advice(); len(best.Candidates) > 0 {
		rec := best.Candidates[best.Recommended]
		for _, n := range adviseStarting {
			if n != start && n < c.MaxInstances {
				a.wantStarting(rec.Policy, rec.IdleTime, rec.MinInstances, n)
			}
		}
		if err := a.run(); err != nil {
			return Advice{}, err
		}
	}
	adv := a.advice()
	adv.Fit = fmt.Sprintf("all %d jobs", len(trace.Jobs))
	adv.Confidence = "untested"
	if hold != nil {
		adv.Fit = fmt.Sprintf("the first %d of %d jobs (the first %.0f%% of the trace's time)", len(fit.Jobs), len(trace.Jobs), 100*(1-holdoutShare))
		rec := adv.Candidates[adv.Recommended]
		cfg := a.config(rec)
		r, err := Run(hold, cfg)
		if err != nil {
			return Advice{}, err
		}
		w := goal.wait(r)
		h := &Holdout{Jobs: len(hold.Jobs), Result: r, Met: w < goal.Under.Seconds()}
		h.Windows = windowWaits(hold, r, goal)
		for _, v := range h.Windows {
			if v < goal.Under.Seconds() {
				h.WindowsMet++
			}
		}
		adv.Holdout = h
		switch {
		case w < 0.9*goal.Under.Seconds() && h.WindowsMet == len(h.Windows):
			adv.Confidence = "high"
		case h.Met:
			adv.Confidence = "medium"
		default:
			adv.Confidence = "low"
		}
	}
	return adv, nil
}

// windowWaits returns the goal's statistic over the jobs of tr submitted in
// each of holdoutWindows equal spans of its time (the last span includes
// the last submit); a span without jobs that started counts as 0.
func windowWaits(tr *Trace, r Result, goal Goal) []float64 {
	span := tr.Jobs[len(tr.Jobs)-1].Submit + 1
	buckets := make([][]float64, holdoutWindows)
	for i, j := range tr.Jobs {
		if w := r.jobWaits[i]; !math.IsNaN(w) {
			k := min(int(int64(j.Submit)*holdoutWindows/int64(span)), holdoutWindows-1)
			buckets[k] = append(buckets[k], w)
		}
	}
	out := make([]float64, holdoutWindows)
	for k, b := range buckets {
		out[k] = goal.wait(Result{Wait: quantiles(b)})
	}
	return out
}

// adviser runs candidate settings, each once, in parallel batches.
type adviser struct {
	trace   *Trace
	base    Config
	goal    Goal
	cands   []Candidate
	tried   map[setting]int // index in cands
	pending []int
}

// setting identifies a candidate.
type setting struct {
	policy            string
	idle, minN, start int
}

func (a *adviser) key(policy string, idle, minN int) setting {
	return setting{policy, idle, minN, a.base.Compute.MaxStartingNodes()}
}

// want queues a setting, with the compute's own max_starting_nodes,
// unless it was tried.
func (a *adviser) want(policy string, idle, minN int) {
	a.wantStarting(policy, idle, minN, a.base.Compute.MaxStartingNodes())
}

// wantStarting queues a setting with max_starting_nodes start (0: no
// cap) unless it was tried.
func (a *adviser) wantStarting(policy string, idle, minN, start int) {
	k := setting{policy, idle, minN, start}
	if _, ok := a.tried[k]; ok {
		return
	}
	c := Candidate{Policy: policy, IdleTime: idle, MinInstances: minN, MaxStartingNodes: start}
	c.Setting = fmt.Sprintf("fixed idle %ds, min %d", idle, minN)
	if policy == autoscaler.AdaptivePolicy {
		c.Setting = fmt.Sprintf("adaptive (ref %ds), min %d", idle, minN)
	}
	if start != a.base.Compute.MaxStartingNodes() {
		c.Setting += fmt.Sprintf(", start %d", start)
	}
	a.tried[k] = len(a.cands)
	a.pending = append(a.pending, len(a.cands))
	a.cands = append(a.cands, c)
}

func (a *adviser) meets(policy string, idle, minN int) bool {
	i, ok := a.tried[a.key(policy, idle, minN)]
	return ok && a.goal.wait(a.cands[i].Result) < a.goal.Under.Seconds()
}

func (a *adviser) config(c Candidate) Config {
	cfg := a.base
	cfg.Policy = c.Policy
	cfg.Compute.IdleTimeBeforeScaleDown = c.IdleTime
	cfg.Compute.MinInstances = c.MinInstances
	if c.MaxStartingNodes != cfg.Compute.MaxStartingNodes() {
		ext := api.ComputeExtensions{}
		if cfg.Compute.Tide != nil {
			ext = *cfg.Compute.Tide
		}
		ext.MaxStartingNodes = c.MaxStartingNodes
		cfg.Compute.Tide = &ext
	}
	cfg.SeriesPoints = 0
	return cfg
}

// run simulates the queued settings, one per CPU at a time.
func (a *adviser) run() error {
	todo := a.pending
	a.pending = nil
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for k := range work {
				i := todo[k]
				a.cands[i].Result, errs[k] = Run(a.trace, a.config(a.cands[i]))
			}
		})
	}
	for k := range todo {
		work <- k
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// advice sorts the candidates cheapest first (then fastest, then the
// shorter idle time), marks the frontier and picks the recommendation.
func (a *adviser) advice() Advice {
	cands, goal := a.cands, a.goal
	slices.SortStableFunc(cands, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.Result.Cost, b.Result.Cost), cmp.Compare(goal.wait(a.Result), goal.wait(b.Result)),
			cmp.Compare(a.MinInstances, b.MinInstances), cmp.Compare(a.IdleTime, b.IdleTime))
	})
	// Cheapest first: a candidate is on the frontier when it waits less
	// than every cheaper one.
	best := -1.0
	for i := range cands {
		if w := goal.wait(cands[i].Result); best < 0 || w < best {
			cands[i].Frontier, best = true, w
		}
	}
	adv := Advice{Goal: goal.String(), Candidates: cands, Recommended: -1}
	for i := range cands {
		if goal.wait(cands[i].Result) < goal.Under.Seconds() {
			adv.Recommended, adv.Met = i, true
			break
		}
	}
	if adv.Recommended < 0 {
		adv.Recommended = 0
		for i := range cands {
			if goal.wait(cands[i].Result) < goal.wait(cands[adv.Recommended].Result) {
				adv.Recommended = i
			}
		}
	}
	return adv
}
