package sweep

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// NoMetricTrials is how many trials must complete without logging the
// primary metric (and none with it) before a sweep gives up.
const NoMetricTrials = 3

// Stop is a trial to cancel and why.
type Stop struct {
	Index  int
	Reason string
	// Early: the early termination policy stopped it (the trial keeps
	// the reason).
	Early bool
}

// Decision is what to do with a sweep now.
type Decision struct {
	// Start is how many new trials to start.
	Start int
	// Stop are the running trials to cancel.
	Stop []Stop
	// Status is the sweep's new status when it ends ("" while it runs),
	// Error why it failed, and Note what ended it early.
	Status string
	Error  string
	Note   string
	// Unlogged are the trials that completed without logging the
	// primary metric when that stops the sweep.
	Unlogged []string
}

// Decide looks at a sweep's trials (s.Trials, whose Status mirrors their
// jobs) and the primary metric each logged so far (series, by trial
// index) at time now, and says what happens next: trials the early
// termination policy stops, how many new trials start (within
// max_concurrent_trials and max_total_trials), and, once no trial runs,
// the sweep's end. A cancel, limits.timeout, or trials that complete
// without logging the primary metric stop the running trials and start
// no more.
func Decide(s *api.Job, series map[int][]float64, now time.Time) Decision {
	var d Decision
	goal := s.Objective.Goal
	running := 0
	for _, t := range s.Trials {
		if !api.JobTerminal(t.Status) {
			running++
		}
	}
	halt := ""
	switch {
	case s.Status == api.JobCancelRequested:
		halt = "sweep " + s.Name + " was canceled"
	case s.Limits != nil && s.Limits.Timeout > 0 && !s.StartTime.IsZero() && now.Sub(s.StartTime) >= time.Duration(s.Limits.Timeout)*time.Second:
		halt = fmt.Sprintf("the sweep's limits.timeout (%ds) passed", s.Limits.Timeout)
		d.Note = halt
	}
	if unlogged := noMetric(s); unlogged != nil {
		m := s.Objective.PrimaryMetric
		d.Error = fmt.Sprintf("trials %s completed without logging the primary metric %s; log it from the trial with print(\"%s%s=VALUE\") or mlflow.log_metric(%q, VALUE)",
			strings.Join(unlogged, ", "), m, api.MetricPrefix, m, m)
		halt, d.Unlogged = d.Error, unlogged
	}
	if halt != "" {
		for _, t := range s.Trials {
			if !api.JobTerminal(t.Status) && t.Status != api.JobCancelRequested && t.Job != "" {
				d.Stop = append(d.Stop, Stop{Index: t.Index, Reason: halt})
			}
		}
	} else if et := s.EarlyTermination; et != nil {
		for _, t := range s.Trials {
			if t.Status != api.JobRunning {
				continue
			}
			if why := evaluate(et, goal, s.Trials, series, t.Index); why != "" {
				d.Stop = append(d.Stop, Stop{Index: t.Index, Reason: why, Early: true})
			}
		}
	}
	if halt == "" {
		d.Start = min(spec.SweepMaxConcurrent(s)-running, spec.SweepMaxTrials(s)-len(s.Trials))
		d.Start = max(d.Start, 0)
	}
	if running > 0 || d.Start > 0 {
		return d
	}
	switch {
	case s.Status == api.JobCancelRequested:
		d.Status = api.JobCanceled
	case d.Error != "":
		d.Status = api.JobFailed
	case Best(s.Trials, goal) >= 0:
		d.Status = api.JobCompleted
	default:
		d.Status = api.JobFailed
		counts := map[string]int{}
		for _, t := range s.Trials {
			counts[strings.ToLower(t.Status)]++
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
		d.Error = fmt.Sprintf("no trial completed with primary metric %s (trials: %s)", s.Objective.PrimaryMetric, strings.Join(parts, ", "))
	}
	return d
}

// noMetric returns the trials that completed without logging the
// primary metric when there are enough of them (and none logged it) for
// the sweep to give up; nil otherwise.
func noMetric(s *api.Job) []string {
	need := min(NoMetricTrials, spec.SweepMaxTrials(s))
	var without []string
	for _, t := range s.Trials {
		if t.Reports > 0 {
			return nil
		}
		if t.Status == api.JobCompleted {
			without = append(without, t.Job)
		}
	}
	if len(without) < need {
		return nil
	}
	return without
}

// better reports whether a beats b for goal.
func better(goal string, a, b float64) bool {
	if goal == api.GoalMinimize {
		return a < b
	}
	return a > b
}

// Best returns the index in trials of the best completed trial (by the
// last value of the primary metric it logged), or -1.
func Best(trials []api.SweepTrial, goal string) int {
	best := -1
	for i, t := range trials {
		if t.Status != api.JobCompleted || t.Metric == nil {
			continue
		}
		if best < 0 || better(goal, *t.Metric, *trials[best].Metric) {
			best = i
		}
	}
	return best
}

// Rank orders trials (indices into trials) best first by the last value
// of the primary metric; trials that logged none come last, in start
// order.
func Rank(trials []api.SweepTrial, goal string) []int {
	out := make([]int, len(trials))
	for i := range out {
		out[i] = i
	}
	slices.SortStableFunc(out, func(a, b int) int {
		ma, mb := trials[a].Metric, trials[b].Metric
		switch {
		case ma == nil && mb == nil:
			return 0
		case ma == nil:
			return 1
		case mb == nil:
			return -1
		case better(goal, *ma, *mb):
			return -1
		case better(goal, *mb, *ma):
			return 1
		}
		return cmp.Compare(a, b)
	})
	return out
}
