package simulate

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// nodeTime adds up node time exactly, in whole seconds and the nanoseconds
// left over: time.Duration (int64 nanoseconds) wraps at about 2.5 million
// node-hours, which a year of a 300-node cluster passes, and printed
// negative busy hours and cost. Whole seconds in an int64 reach 2.5e15
// hours.
type nodeTime struct {
	sec int64
	ns  int64 // always in [0, 1e9)
}

func (t *nodeTime) add(d time.Duration) {
	t.sec += int64(d / time.Second)
	t.ns += int64(d % time.Second)
	for t.ns >= int64(time.Second) {
		t.sec++
		t.ns -= int64(time.Second)
	}
	for t.ns < 0 {
		t.sec--
		t.ns += int64(time.Second)
	}
}

// addN adds n times d, each added exactly (n·d may not fit a Duration).
func (t *nodeTime) addN(d time.Duration, n int) {
	t.sec += int64(n) * int64(d/time.Second)
	t.ns += int64(n) * int64(d%time.Second)
	t.sec += t.ns / int64(time.Second)
	t.ns %= int64(time.Second)
	if t.ns < 0 {
		t.sec--
		t.ns += int64(time.Second)
	}
}

func (t nodeTime) hours() float64 {
	return (float64(t.sec) + float64(t.ns)/1e9) / 3600
}

// ErrSimulatorBug is wrapped by the errors of a run whose figures cannot
// be right (a negative total, more node time than its nodes could have, busy
// time other than the trace's): a defect of the simulator, not of its input,
// so callers report it as such rather than as a usage mistake.
var ErrSimulatorBug = errors.New("this is a bug in tide simulate; please report it with the trace")

// check refuses totals that cannot be: a negative or non-finite figure,
// more nodes than max_instances, a wait longer than the replay, more node
// time than the most nodes ever alive for the whole replay (which is at
// most max_instances for the wall-clock time), or
// (without preemptions) busy time other than the trace's own job time. Any
// of these is a bug in the simulator, reported as one rather than printed.
func (r Result) check(trace *Trace, cfg Config) error {
	h := r.NodeHours
	figures := map[string]float64{"busy node-hours": h.Busy, "idle node-hours": h.Idle, "booting node-hours": h.Booting,
		"total node-hours": h.Total, "cost": r.Cost, "mean wait": r.Wait.Mean, "longest wait": r.MaxWait}
	for name, v := range figures {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("simulation produced an impossible %s (%g): %w", name, v, ErrSimulatorBug)
		}
	}
	if r.PeakNodes > cfg.Compute.MaxInstances {
		return fmt.Errorf("simulation had %d nodes at once, above max_instances %d: %w", r.PeakNodes, cfg.Compute.MaxInstances, ErrSimulatorBug)
	}
	if wall := r.Horizon * 3600; r.MaxWait > wall*(1+1e-9)+1e-6 {
		return fmt.Errorf("simulation made a job wait %.0f s in a replay of %.0f s: %w", r.MaxWait, wall, ErrSimulatorBug)
	}
	// Every node alive counts toward the peak, so node time cannot pass
	// peak nodes for the whole horizon (a relative slack covers float
	// rounding).
	if bound := float64(r.PeakNodes) * r.Horizon; h.Total > bound*(1+1e-9)+1e-9 {
		return fmt.Errorf("simulation produced %.1f node-hours, more than %d nodes for %.1f hours can hold: %w", h.Total, r.PeakNodes, r.Horizon, ErrSimulatorBug)
	}
	if r.Preemptions == 0 {
		var want nodeTime
		for _, j := range trace.Jobs {
			want.addN(j.Duration, j.Instances)
		}
		if w := want.hours(); math.Abs(h.Busy-w) > 1e-6*math.Max(1, w) {
			return fmt.Errorf("simulation counted %.3f busy node-hours, but the trace's jobs run %.3f: %w", h.Busy, w, ErrSimulatorBug)
		}
	}
	return nil
}
