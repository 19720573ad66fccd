package simulate

import (
	"cmp"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/internal/autoscaler"
)

// AdviseIdleTimes are the idle_time_before_scale_down values Advise tries,
// in seconds.
var AdviseIdleTimes = []int{0, 60, 120, 300, 600, 1800, 3600}

// adviseMins are the min_instances values Advise tries (at the compute's
// own idle time), as far as max_instances allows.
var adviseMins = []int{1, 2, 4, 8}

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
	// Policy, IdleTime and MinInstances are the compute settings.
	Policy       string `json:"policy"`
	IdleTime     int    `json:"idle_time_before_scale_down"`
	MinInstances int    `json:"min_instances"`
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
	// Candidates are all settings tried, cheapest first.
	Candidates []Candidate `json:"candidates"`
	// Recommended indexes Candidates: the cheapest that meets the goal,
	// or the fastest when none does.
	Recommended int `json:"recommended"`
	// Met says whether the recommendation meets the goal.
	Met bool `json:"met"`
}

// Advise simulates trace under the compute's settings varied as tide
// advise promises: every idle time of AdviseIdleTimes, a few
// min_instances and the adaptive policy, in parallel, and recommends the
// cheapest that meets goal.
func Advise(trace *Trace, base Config, goal Goal) (Advice, error) {
	var cands []Candidate
	add := func(policy string, idle, minN int) {
		setting := fmt.Sprintf("fixed idle %ds, min %d", idle, minN)
		if policy == autoscaler.AdaptivePolicy {
			setting = fmt.Sprintf("adaptive, min %d", minN)
		}
		cands = append(cands, Candidate{Setting: setting, Policy: policy, IdleTime: idle, MinInstances: minN})
	}
	c := &base.Compute
	for _, idle := range AdviseIdleTimes {
		add(autoscaler.DefaultPolicy, idle, c.MinInstances)
	}
	for _, m := range adviseMins {
		if m != c.MinInstances && m <= c.MaxInstances {
			add(autoscaler.DefaultPolicy, c.IdleTimeBeforeScaleDown, m)
		}
	}
	add(autoscaler.AdaptivePolicy, c.IdleTimeBeforeScaleDown, c.MinInstances)

	errs := make([]error, len(cands))
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range work {
				cfg := base
				cfg.Policy = cands[i].Policy
				cfg.Compute.IdleTimeBeforeScaleDown = cands[i].IdleTime
				cfg.Compute.MinInstances = cands[i].MinInstances
				cfg.SeriesPoints = 0
				cands[i].Result, errs[i] = Run(trace, cfg)
			}
		})
	}
	for i := range cands {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Advice{}, err
		}
	}
	slices.SortStableFunc(cands, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.Result.Cost, b.Result.Cost), cmp.Compare(goal.wait(a.Result), goal.wait(b.Result)))
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
	return adv, nil
}
