package sweep

import (
	"fmt"
	"slices"

	"github.com/tideml/tide/api"
)

// evalPoint is the latest interval at which policy et looks at a trial
// that logged the primary metric k times (each value is one interval):
// every evaluation_interval intervals, from interval delay_evaluation on;
// 0 when there is none yet.
func evalPoint(et *api.EarlyTermination, k int) int {
	every := max(et.EvaluationInterval, 1)
	p := k - k%every
	if p < max(et.DelayEvaluation, 1) {
		return 0
	}
	return p
}

// bestOf is the best of the first p values of xs.
func bestOf(goal string, xs []float64, p int) float64 {
	b := xs[0]
	for _, x := range xs[1:p] {
		if better(goal, x, b) {
			b = x
		}
	}
	return b
}

func meanOf(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// evaluate applies policy et to the running trial self at its latest
// evaluation interval, comparing it with every trial that reached that
// interval; it returns why the trial stops, or "".
func evaluate(et *api.EarlyTermination, goal string, trials []api.SweepTrial, series map[int][]float64, self int) string {
	own := series[self]
	p := evalPoint(et, len(own))
	if p == 0 {
		return ""
	}
	mine := bestOf(goal, own, p)
	switch et.Type {
	case api.PolicyBandit:
		top := mine
		for _, t := range trials {
			if xs := series[t.Index]; len(xs) >= p {
				if b := bestOf(goal, xs, p); better(goal, b, top) {
					top = b
				}
			}
		}
		var limit float64
		var how string
		switch {
		case et.SlackFactor != nil && goal == api.GoalMinimize:
			limit, how = top*(1+*et.SlackFactor), fmt.Sprintf("best %.4g × (1+%g)", top, *et.SlackFactor)
		case et.SlackFactor != nil:
			limit, how = top/(1+*et.SlackFactor), fmt.Sprintf("best %.4g / (1+%g)", top, *et.SlackFactor)
		case goal == api.GoalMinimize:
			limit, how = top+*et.SlackAmount, fmt.Sprintf("best %.4g + %g", top, *et.SlackAmount)
		default:
			limit, how = top-*et.SlackAmount, fmt.Sprintf("best %.4g - %g", top, *et.SlackAmount)
		}
		if better(goal, limit, mine) {
			return fmt.Sprintf("bandit policy at interval %d: its best %.4g is worse than %.4g (%s)", p, mine, limit, how)
		}
	case api.PolicyMedian:
		var avgs []float64
		for _, t := range trials {
			if xs := series[t.Index]; t.Index != self && len(xs) >= p {
				avgs = append(avgs, meanOf(xs[:p]))
			}
		}
		if len(avgs) == 0 {
			return ""
		}
		slices.Sort(avgs)
		med := avgs[len(avgs)/2]
		if len(avgs)%2 == 0 {
			med = (avgs[len(avgs)/2-1] + avgs[len(avgs)/2]) / 2
		}
		if better(goal, med, mine) {
			return fmt.Sprintf("median stopping policy at interval %d: its best %.4g is worse than the median %.4g of the other %d trials' running averages", p, mine, med, len(avgs))
		}
	case api.PolicyTruncation:
		type entry struct {
			index int
			value float64
		}
		var group []entry
		for _, t := range trials {
			xs := series[t.Index]
			if len(xs) < p || (et.ExcludeFinishedJobs && t.Index != self && api.JobTerminal(t.Status)) {
				continue
			}
			group = append(group, entry{t.Index, xs[p-1]})
		}
		cut := len(group) * et.TruncationPercentage / 100
		if cut == 0 {
			return ""
		}
		// Worst first; ties keep start order, so later trials are cut
		// before earlier ones of the same value.
		slices.SortStableFunc(group, func(a, b entry) int {
			switch {
			case better(goal, b.value, a.value):
				return -1
			case better(goal, a.value, b.value):
				return 1
			}
			return b.index - a.index
		})
		for _, e := range group[:cut] {
			if e.index == self {
				return fmt.Sprintf("truncation selection at interval %d: its value %.4g is in the worst %d%% of %d trials", p, own[p-1], et.TruncationPercentage, len(group))
			}
		}
	}
	return ""
}
