package autoscaler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tideml/tide/api"
)

// Adaptive histogram settings.
const (
	gapBin   = 10 * time.Second
	gapBins  = 720 // 2 hours of 10 s bins
	gapRange = gapBin * gapBins
	// gapWindow is about how many recent gaps the histogram reflects:
	// when the weight reaches it every bin is halved, so old behaviour
	// fades and the policy follows the workload.
	gapWindow = 4096
	// gapEvery is how many observations pass between two recomputations
	// of the keep-alive, which costs one pass over the bins.
	gapEvery = 64
)

// GapHistory is a compute's recent history of idle gaps: for every node
// that went idle, the time until the next job that could use it was
// submitted (the node itself may have left meanwhile). Like the
// application histograms of the hybrid keep-alive policy of "Serverless in
// the Wild" (Shahrad et al., USENIX ATC 2020) it is a histogram with a
// fixed range plus an out-of-range count, and the adaptive policy picks
// its idle timeout from it.
//
// The history is state the caller owns and feeds (the simulator per event,
// the controller per compute): NodeIdle when a node turns idle, Demand when
// a job is submitted. Plan and the policy only read it, so they stay pure.
// A GapHistory is not safe for concurrent use.
type GapHistory struct {
	// BootTime is how long a new node takes to boot: the price, in node
	// time and in a job's wait, of letting a node go too early.
	BootTime time.Duration
	// WaitWeight is what one second of a job's wait is worth in node
	// seconds: 0 minimizes node time alone (the keep-alive of ski rental),
	// larger values keep nodes longer to cut waits.
	WaitWeight float64

	bins    [gapBins]float64
	over    float64 // gaps beyond gapRange or never closed
	weight  float64
	pending []time.Time // idle starts not matched to a job yet, oldest first
	demand  []arrival   // recent submits, oldest first, from demandHead
	dhead   int
	head    int
	seen    int
	keep    time.Duration
}

// NewGapHistory returns an empty history with tide's defaults: a 180 s
// boot time and a wait weight of 0 (the warm nodes of the adaptive policy,
// not long idle timeouts, are what cut waits).
func NewGapHistory() *GapHistory {
	return &GapHistory{BootTime: 180 * time.Second}
}

// arrival is a submit (Unix nanoseconds) and the nodes demanded up to and
// including it.
type arrival struct {
	at   int64
	cum  int
	jobs int // submits up to and including this one
}

// demandMemory is how far back DemandSince can look.
const demandMemory = 2 * time.Hour

// DemandSince returns the number of nodes the jobs submitted after since
// asked for (as far back as two hours).
func (h *GapHistory) DemandSince(since time.Time) int {
	nodes, _ := h.since(since)
	return nodes
}

// SubmitsSince returns the number of jobs submitted after since (as far
// back as two hours).
func (h *GapHistory) SubmitsSince(since time.Time) int {
	_, jobs := h.since(since)
	return jobs
}

// since returns the nodes and jobs submitted after t.
func (h *GapHistory) since(since time.Time) (nodes, jobs int) {
	d := h.demand[h.dhead:]
	if len(d) == 0 {
		return 0, 0
	}
	t := since.UnixNano()
	i, _ := slices.BinarySearchFunc(d, t, func(a arrival, t int64) int {
		if a.at > t {
			return 1
		}
		return -1
	})
	var before arrival
	if i > 0 {
		before = d[i-1]
	} else if h.dhead > 0 {
		before = h.demand[h.dhead-1]
	}
	last := d[len(d)-1]
	return last.cum - before.cum, last.jobs - before.jobs
}

// NodeIdle records that a node turned idle at.
func (h *GapHistory) NodeIdle(at time.Time) {
	h.pending = append(h.pending, at)
}

// Demand records that a job needing nodes nodes was submitted at: it
// closes the gaps of the nodes that went idle most recently.
func (h *GapHistory) Demand(at time.Time, nodes int) {
	a := arrival{at: at.UnixNano(), cum: nodes, jobs: 1}
	if len(h.demand) > 0 {
		a.cum += h.demand[len(h.demand)-1].cum
		a.jobs += h.demand[len(h.demand)-1].jobs
	}
	ns := a.at
	h.demand = append(h.demand, a)
	for h.dhead < len(h.demand) && ns-h.demand[h.dhead].at > int64(demandMemory) {
		h.dhead++
	}
	if h.dhead > 1024 && h.dhead*2 > len(h.demand) {
		// Keep the entry before the window: DemandSince subtracts its sum.
		h.demand = append(h.demand[:0], h.demand[h.dhead-1:]...)
		h.dhead = 1
	}
	// Gaps that have grown past the range are out of range whatever comes.
	for h.head < len(h.pending) && at.Sub(h.pending[h.head]) >= gapRange {
		h.head++
		h.add(-1)
	}
	if h.head > 1024 && h.head*2 > len(h.pending) {
		h.pending = append(h.pending[:0], h.pending[h.head:]...)
		h.head = 0
	}
	for ; nodes > 0 && len(h.pending) > h.head; nodes-- {
		last := len(h.pending) - 1
		h.add(at.Sub(h.pending[last]))
		h.pending = h.pending[:last]
	}
}

// add records one gap; a negative gap is out of range.
func (h *GapHistory) add(gap time.Duration) {
	if gap < 0 || gap >= gapRange {
		h.over++
	} else {
		h.bins[gap/gapBin]++
	}
	h.weight++
	if h.weight >= gapWindow {
		for i := range h.bins {
			h.bins[i] /= 2
		}
		h.over /= 2
		h.weight /= 2
	}
	h.seen++
	if h.seen%gapEvery == 0 {
		h.keep = h.bestKeep()
	}
}

// bestKeep returns the idle timeout that minimizes the expected cost of an
// idle node, in node seconds: a gap g kept for T costs min(g, T) of idle
// time; a gap longer than T costs a boot, BootTime of booting plus
// WaitWeight × BootTime of waiting.
func (h *GapHistory) bestKeep() time.Duration {
	miss := h.BootTime.Seconds() * (1 + h.WaitWeight)
	// Walk T over the bin edges: idle is the idle time of the gaps that
	// end before T (their mid-bin length), beyond the count of longer ones.
	var idle, below float64
	best, bestCost := time.Duration(0), h.weight*miss
	for i := range gapBins {
		idle += h.bins[i] * (float64(i) + 0.5) * gapBin.Seconds()
		below += h.bins[i]
		t := time.Duration(i+1) * gapBin
		beyond := h.weight - below
		cost := idle + beyond*(t.Seconds()+miss)
		if cost < bestCost {
			best, bestCost = t, cost
		}
	}
	return best
}

// Closed returns how many gaps the history has closed (matched to a job or
// seen to pass the histogram's range) in all.
func (h *GapHistory) Closed() int { return h.seen }

// KeepAlive returns the idle timeout the history recommends, and false
// while it has closed too few gaps to recommend one.
func (h *GapHistory) KeepAlive() (time.Duration, bool) { return h.keep, h.seen >= gapEvery }

// Adaptive defaults, chosen on the Philly trace (docs/simulate.md).
const (
	DefaultAdaptiveWindow       = 3 * time.Minute
	DefaultAdaptiveWarmFactor   = 1.0
	DefaultAdaptiveCreateWindow = 2 * time.Minute
	DefaultAdaptiveCreateFactor = 0.9
)

// Adaptive is the policy that learns from each compute's GapHistory
// (Compute.Gaps). It makes two choices:
//
//   - The idle timeout: the one that minimizes the expected node time of
//     an idle node over the histogram of idle gaps (GapHistory.KeepAlive),
//     within [Min, Max]; the compute's idle_time_before_scale_down until
//     the history has learned one.
//   - Warm nodes, for bursts: jobs arrive in bursts (in the Philly trace
//     more than half of all submits follow the previous one within 10 s),
//     so recent demand predicts demand. The policy keeps up to
//     WarmFactor × the nodes asked for in the last Window as idle nodes
//     that do not time out, but boots new nodes ahead of demand only for
//     CreateFactor × the jobs submitted in the last CreateWindow: keeping
//     a node that exists is cheap, booting one that may not be used is
//     not, and a burst is many jobs (one 8-node job predicts no second
//     one). Both round down, so a lone job warms nothing.
//
// Without a history (the caller keeps none) it behaves like Fixed. Zero
// fields take the Default* values; Max zero means one hour.
type Adaptive struct {
	// Min and Max bound the idle timeout.
	Min, Max time.Duration
	// Window and WarmFactor size the idle nodes kept warm.
	Window     time.Duration
	WarmFactor float64
	// CreateWindow and CreateFactor size the nodes booted ahead of demand,
	// from the number of jobs submitted.
	CreateWindow time.Duration
	CreateFactor float64
}

// Decide returns the idle timeout the compute's history recommends and the
// warm nodes its recent demand asks for.
func (a Adaptive) Decide(c *Compute, now time.Time) Decision {
	if c.Gaps == nil {
		return Fixed{}.Decide(c, now)
	}
	if c.Gaps.BootTime <= 0 {
		// A node that boots at once costs nothing to let go and to
		// replace: keeping one idle only costs.
		return Decision{IdleTimeout: max(a.Min, 0), Setting: "adaptive: boot time 0, no idle nodes kept"}
	}
	hi := cmp.Or(a.Max, time.Hour)
	window := cmp.Or(a.Window, DefaultAdaptiveWindow)
	warmF := cmp.Or(a.WarmFactor, DefaultAdaptiveWarmFactor)
	cwindow := cmp.Or(a.CreateWindow, DefaultAdaptiveCreateWindow)
	createF := cmp.Or(a.CreateFactor, DefaultAdaptiveCreateFactor)

	idle := c.Counted.Idle
	for i := range c.Nodes {
		if c.Nodes[i].State == api.NodeIdle && c.Nodes[i].Job == "" {
			idle++
		}
	}
	keep := int(math.Floor(warmF * float64(c.Gaps.DemandSince(now.Add(-window)))))
	create := int(math.Floor(createF * float64(c.Gaps.SubmitsSince(now.Add(-cwindow)))))
	timeout, learned := c.Gaps.KeepAlive()
	if !learned {
		timeout = c.IdleTimeout
	}
	return Decision{
		IdleTimeout: min(max(timeout, a.Min), hi),
		Warm:        min(keep, idle+create),
		Setting:     "adaptive idle timeout (learned from idle gaps)",
	}
}

// gapState is a GapHistory as JSON: what it learned, so a server restart
// does not start the adaptive policy over.
type gapState struct {
	BootTime   time.Duration   `json:"boot_time"`
	WaitWeight float64         `json:"wait_weight,omitempty"`
	Bins       map[int]float64 `json:"bins,omitempty"` // sparse: most bins are empty
	Over       float64         `json:"over"`
	Weight     float64         `json:"weight"`
	Pending    []time.Time     `json:"pending,omitempty"`
	Demand     []arrivalState  `json:"demand,omitempty"`
	DHead      int             `json:"demand_head,omitempty"`
	Seen       int             `json:"seen"`
	Keep       time.Duration   `json:"keep"`
}

type arrivalState struct {
	At   int64 `json:"at"`
	Cum  int   `json:"cum"`
	Jobs int   `json:"jobs"`
}

// MarshalJSON saves the history: its histogram, the idle gaps still open,
// the recent demand and the learned keep-alive.
func (h *GapHistory) MarshalJSON() ([]byte, error) {
	st := gapState{BootTime: h.BootTime, WaitWeight: h.WaitWeight, Over: h.over, Weight: h.weight, Seen: h.seen, Keep: h.keep,
		Pending: h.pending[h.head:]}
	for i, v := range h.bins {
		if v != 0 {
			if st.Bins == nil {
				st.Bins = map[int]float64{}
			}
			st.Bins[i] = v
		}
	}
	from := max(h.dhead-1, 0) // the entry before the window: DemandSince subtracts its sum
	for _, a := range h.demand[from:] {
		st.Demand = append(st.Demand, arrivalState{At: a.at, Cum: a.cum, Jobs: a.jobs})
	}
	st.DHead = h.dhead - from
	return json.Marshal(st)
}

// UnmarshalJSON restores a history saved by MarshalJSON.
func (h *GapHistory) UnmarshalJSON(b []byte) error {
	var st gapState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	*h = GapHistory{BootTime: st.BootTime, WaitWeight: st.WaitWeight, over: st.Over, weight: st.Weight, seen: st.Seen, keep: st.Keep,
		pending: st.Pending}
	for i, v := range st.Bins {
		if i < 0 || i >= gapBins {
			return fmt.Errorf("gap history: bin %d out of range", i)
		}
		h.bins[i] = v
	}
	for _, a := range st.Demand {
		h.demand = append(h.demand, arrival{at: a.At, cum: a.Cum, jobs: a.Jobs})
	}
	if st.DHead < 0 || st.DHead > len(h.demand) {
		return fmt.Errorf("gap history: demand head %d out of range", st.DHead)
	}
	h.dhead = st.DHead
	return nil
}
