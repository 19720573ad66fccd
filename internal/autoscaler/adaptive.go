package autoscaler

import (
	"cmp"
	"time"

	"github.com/tideml/tide/api"
)

// keepPrior is how many gaps of the whole day's histogram each hour's
// histogram is blended with, so an hour with few gaps of its own decides
// like the day does and an hour with many decides by its own.
const keepPrior = 16

// curve is, for one hour and every candidate timeout binEdge(i), the
// expected node time of its idle gaps (idle plus booting, in seconds) and
// how many of them miss (the job waits for a boot).
type curve struct {
	cost, miss [gapBins + 1]float64
}

// curves returns each hour's curve, its histogram blended with the day's.
func (h *GapHistory) curves() *[hours]curve {
	var day [gapBins]float64
	var dayOver, dayW float64
	for k := range hours {
		for i, v := range h.bins[k] {
			day[i] += v
			dayW += v
		}
		dayOver += h.over[k]
		dayW += h.over[k]
	}
	boot := h.BootTime.Seconds()
	var out [hours]curve
	for k := range hours {
		var w float64
		var n [gapBins]float64
		for i := range n {
			n[i] = h.bins[k][i]
			if dayW > 0 {
				n[i] += keepPrior * day[i] / dayW
			}
			w += n[i]
		}
		over := h.over[k]
		if dayW > 0 {
			over += keepPrior * dayOver / dayW
		}
		w += over
		var idle, below float64
		for i := 0; i <= gapBins; i++ {
			t := binEdge(i).Seconds()
			miss := w - below
			out[k].cost[i] = idle + miss*(t+boot)
			out[k].miss[i] = miss
			if i < gapBins {
				mid := (binEdge(i) + binEdge(i+1)).Seconds() / 2
				idle += n[i] * mid
				below += n[i]
			}
		}
	}
	return &out
}

// choose returns each hour's timeout (as a bin edge index) minimizing node
// time plus lambda boot times per miss, and the totals.
func choose(cv *[hours]curve, boot, lambda float64) (idx [hours]int, cost, miss float64) {
	for k := range cv {
		best := 0
		for i := range cv[k].cost {
			if cv[k].cost[i]+lambda*boot*cv[k].miss[i] < cv[k].cost[best]+lambda*boot*cv[k].miss[best] {
				best = i
			}
		}
		idx[k] = best
		cost += cv[k].cost[best]
		miss += cv[k].miss[best]
	}
	return idx, cost, miss
}

// Adaptive is the policy that learns from each compute's GapHistory
// (Compute.Gaps): for the hour of the day, the idle timeout chosen by
// GapHistory from the compute's own idle gaps, within [Min, Max]; the
// compute's idle_time_before_scale_down until the history has learned.
// Without a history (the caller keeps none) it behaves like Fixed. Max
// zero means two hours.
type Adaptive struct {
	// Min and Max bound the idle timeout.
	Min, Max time.Duration
}

// Decide returns the idle timeout the compute's history recommends for
// now's hour.
func (a Adaptive) Decide(c *Compute, now time.Time) Decision {
	if c.Gaps == nil {
		return Fixed{}.Decide(c, now)
	}
	if c.Gaps.BootTime <= 0 {
		// A node that boots at once costs nothing to let go and to
		// replace: keeping one idle only costs.
		return Decision{IdleTimeout: max(a.Min, 0), Setting: "adaptive: boot time 0, no idle nodes kept"}
	}
	timeout, warm, learned := c.Gaps.KeepAlive(now)
	if !learned {
		timeout = c.IdleTimeout
	}
	// Warm nodes are idle nodes kept, never nodes booted for it: at most
	// the idle nodes the queue does not hold. (Counting the ones a waiting
	// gang holds made Plan boot one more node for every warm one with each
	// gang that found too few: on multi-node traces warm nodes cost 16-30 %
	// more node time than the replay priced them at.)
	idle := c.Counted.Idle
	for i := range c.Nodes {
		if c.Nodes[i].State == api.NodeIdle && c.Nodes[i].Job == "" {
			idle++
		}
	}
	limit := c.Cap()
	for _, q := range c.Queued {
		if need := max(q.Instances, 1); need <= limit {
			idle -= need * max(q.Jobs, 1)
		}
	}
	idle = max(idle, 0)
	// Pre-warm for the demand that comes every day in the next boot time,
	// less what of it has come.
	var pre int
	var wake time.Time
	if c.Gaps.setting.prewarm {
		pre, wake = c.Gaps.daily.ahead(now, c.Gaps.BootTime)
		pre -= c.Gaps.DemandSince(now.Truncate(time.Minute).Add(-time.Nanosecond))
		if pre > 0 {
			// Ask again when the minute ends: the nodes held for it may
			// leave then, and on an idle compute nothing else would
			// make Plan look (a week's nodes booted for a batch that did
			// not come stayed idle an hour, to the next wake).
			wake = earliest(wake, now.Truncate(time.Minute).Add(time.Minute))
		}
	}
	// Boot ahead for the rest of a burst that began within a boot time.
	var burst int
	if b := c.Gaps.setting.burst; b > 0 && learned {
		var end time.Time
		if burst, end = c.Gaps.burstLeft(now, b); burst > 0 {
			wake = earliest(wake, end) // its nodes left over may leave then
		}
	}
	return Decision{
		IdleTimeout: min(max(timeout, a.Min), cmp.Or(a.Max, gapRange)),
		Warm:        max(min(warm, idle), pre, burst),
		Wake:        wake,
		Setting:     "adaptive idle timeout (learned from idle gaps)",
	}
}

// earliest returns the earlier of two wake times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
