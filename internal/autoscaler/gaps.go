package autoscaler

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Idle gaps are binned finely where keep-alives are decided (10 s bins up
// to 10 minutes) and coarsely beyond (1 minute bins up to 2 hours).
const (
	fineBin   = 10 * time.Second
	fineBins  = 60
	coarseBin = time.Minute
	gapBins   = fineBins + 110
	gapRange  = fineBin*fineBins + coarseBin*(gapBins-fineBins) // 2 h
	// hours is the number of contexts: the hour of the day (UTC) a node
	// went idle in.
	hours = 24
	// gapWindow is about how many recent gaps the histograms reflect:
	// when their weight reaches it every bin is halved, so old behaviour
	// fades and the policy follows the workload.
	gapWindow = 8192
	// gapEvery is how many gaps close between two choices of the setting
	// (each replays the logged events under up to 84 candidates); the first
	// choices come after gapFirst and 4 × gapFirst gaps.
	gapEvery = 256
	gapFirst = 16
	// chooseEvery is the least time between two choices: the setting is
	// one timeout per hour of the day, and a compute closing 256 gaps in
	// less than an hour (the 1,000,000-job trace closes one every 9 s)
	// gains nothing from choosing more often, while its replays took
	// more than half of its replay time. Two hours since the confidence
	// rule judges every candidate's replay to its end (confidence.go):
	// hourly, the 1,000,000-job replay took 10.5 CPU-s; every two hours
	// 8.5, for the same node-hours within 0.01 %. The generated traces
	// and Philly close 256 gaps in 8 hours or more: no choice moved.
	chooseEvery = 2 * time.Hour
)

// binOf returns the bin of a gap in [0, gapRange).
func binOf(g time.Duration) int {
	if g < fineBin*fineBins {
		return int(g / fineBin)
	}
	return fineBins + int((g-fineBin*fineBins)/coarseBin)
}

// binEdge returns the lower edge of bin i (binEdge(gapBins) is gapRange).
func binEdge(i int) time.Duration {
	if i <= fineBins {
		return time.Duration(i) * fineBin
	}
	return fineBin*fineBins + time.Duration(i-fineBins)*coarseBin
}

// GapHistory is a compute's history: the idle gaps of its nodes by hour
// of the day, and when its jobs arrive by time of day. An idle gap is, for
// every node that went idle, the time until the next job that could use it
// was submitted (the node itself may have left meanwhile). Like the
// application histograms of the hybrid keep-alive policy of "Serverless in
// the Wild" (Shahrad et al., USENIX ATC 2020) each hour's is a histogram
// with a fixed range (2 h) plus an out-of-range count.
//
// The history is state the caller owns and feeds (the simulator per event,
// the controller per compute): NodeIdle when a node turns idle, Demand when
// a job is submitted; BootTime and Reference are the compute's. Plan and
// the policy only read it, so they stay pure. A GapHistory is not safe for
// concurrent use.
type GapHistory struct {
	// BootTime is how long a new node takes to boot: the price, in node
	// time and in a job's wait, of letting a node go too early. The
	// controller measures it per compute.
	BootTime time.Duration
	// Reference is the fixed idle time the adaptive policy must do at least
	// as well as: the compute's idle_time_before_scale_down (120 s,
	// Azure's default, until the caller sets it).
	Reference time.Duration

	bins    [hours][gapBins]float64
	over    [hours]float64 // gaps beyond gapRange or never closed
	weight  float64
	pending []time.Time // idle starts not matched to a job yet, oldest first
	head    int
	demand  []arrival // recent submits, oldest first, from dhead
	dhead   int
	seen    int
	due     bool  // a choice is due (gapEvery gaps closed since the last)
	chosen  int64 // when the setting was last chosen (Unix nanoseconds)
	setting candidate
	learned bool
	log     []logEvent // recent events, for replaying candidate settings
	daily   profile    // demand by minute of the day, for pre-warming
	buf     replayBuf  // the replays' buffers, kept from choice to choice
}

// NewGapHistory returns an empty history with a 180 s boot time, until
// the caller measures the compute's, and a 120 s Reference.
func NewGapHistory() *GapHistory {
	return &GapHistory{BootTime: 180 * time.Second, Reference: 120 * time.Second}
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
	d := h.demand[h.dhead:]
	if len(d) == 0 {
		return 0
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
	return d[len(d)-1].cum - before.cum
}

// NodeIdle records that a node turned idle at.
func (h *GapHistory) NodeIdle(at time.Time) {
	h.record(logEvent{At: at.UnixNano()})
	h.pending = append(h.pending, at)
}

// Demand records that a job needing nodes nodes was submitted at: it
// closes the gaps of the nodes that went idle most recently.
func (h *GapHistory) Demand(at time.Time, nodes int) {
	h.record(logEvent{At: at.UnixNano(), Nodes: max(nodes, 1)})
	h.daily.add(at.UnixNano(), max(nodes, 1))
	a := arrival{at: at.UnixNano(), cum: nodes, jobs: 1}
	if len(h.demand) > 0 {
		a.cum += h.demand[len(h.demand)-1].cum
		a.jobs += h.demand[len(h.demand)-1].jobs
	}
	h.demand = append(h.demand, a)
	for h.dhead < len(h.demand) && a.at-h.demand[h.dhead].at > int64(demandMemory) {
		h.dhead++
	}
	if h.dhead > 1024 && h.dhead*2 > len(h.demand) {
		// Keep the entry before the window: DemandSince subtracts its sum.
		h.demand = append(h.demand[:0], h.demand[h.dhead-1:]...)
		h.dhead = 1
	}
	// Gaps that have grown past the range are out of range whatever comes.
	for h.head < len(h.pending) && at.Sub(h.pending[h.head]) >= gapRange {
		h.add(h.pending[h.head], -1)
		h.head++
	}
	if h.head > 1024 && h.head*2 > len(h.pending) {
		h.pending = append(h.pending[:0], h.pending[h.head:]...)
		h.head = 0
	}
	for ; nodes > 0 && len(h.pending) > h.head; nodes-- {
		last := len(h.pending) - 1
		h.add(h.pending[last], at.Sub(h.pending[last]))
		h.pending = h.pending[:last]
	}
	if h.due && (!h.learned || at.UnixNano()-h.chosen >= int64(chooseEvery)) {
		h.setting, h.learned, h.due, h.chosen = h.bestSetting(), true, false, at.UnixNano()
	}
}

// add records one gap that began at idle; a negative gap is out of range.
func (h *GapHistory) add(idle time.Time, gap time.Duration) {
	hr := idle.UTC().Hour()
	if gap < 0 || gap >= gapRange {
		h.over[hr]++
	} else {
		h.bins[hr][binOf(gap)]++
	}
	h.weight++
	if h.weight >= gapWindow {
		for k := range hours {
			for i := range h.bins[k] {
				h.bins[k][i] /= 2
			}
			h.over[k] /= 2
		}
		h.weight /= 2
	}
	h.seen++
	if h.seen%gapEvery == 0 || h.seen == gapFirst || h.seen == 4*gapFirst {
		h.due = true
	}
}

// Closed returns how many gaps the history has closed (matched to a job or
// seen to pass the histogram's range) in all.
func (h *GapHistory) Closed() int { return h.seen }

// KeepAlive returns the idle timeout the history recommends at at and
// how many of the most recently idle nodes to keep however long they are
// idle, and false while it has closed too few gaps to recommend them.
func (h *GapHistory) KeepAlive(at time.Time) (time.Duration, int, bool) {
	return h.setting.keep[hourOf(at.UnixNano())], h.setting.warm, h.learned
}

// gapState is a GapHistory as JSON: what it learned, so a server restart
// does not start the adaptive policy over.
type gapState struct {
	BootTime  time.Duration           `json:"boot_time"`
	Reference time.Duration           `json:"reference"`
	Bins      map[int]map[int]float64 `json:"hour_bins,omitempty"` // hour → bin → weight; most are empty
	Over      map[int]float64         `json:"hour_over,omitempty"`
	Weight    float64                 `json:"weight"`
	Pending   []time.Time             `json:"pending,omitempty"`
	Demand    []arrivalState          `json:"demand,omitempty"`
	DHead     int                     `json:"demand_head,omitempty"`
	Seen      int                     `json:"seen"`
	Due       bool                    `json:"choice_due,omitempty"`
	Chosen    int64                   `json:"chosen_at,omitempty"`
	Keep      []time.Duration         `json:"hourly_keep,omitempty"`
	Warm      int                     `json:"warm,omitempty"`
	Prewarm   bool                    `json:"prewarm,omitempty"`
	Burst     int                     `json:"burst,omitempty"`
	Log       []logEvent              `json:"log,omitempty"`
	Daily     *profile                `json:"daily,omitempty"`
	Learned   bool                    `json:"learned,omitempty"`
}

type arrivalState struct {
	At   int64 `json:"at"`
	Cum  int   `json:"cum"`
	Jobs int   `json:"jobs"`
}

// MarshalJSON saves the history: its histograms, the idle gaps still
// open, the recent demand and events, the daily profile and the chosen
// setting.
func (h *GapHistory) MarshalJSON() ([]byte, error) {
	st := gapState{BootTime: h.BootTime, Reference: h.Reference, Weight: h.weight, Seen: h.seen, Due: h.due, Chosen: h.chosen,
		Keep: h.setting.keep[:], Warm: h.setting.warm, Prewarm: h.setting.prewarm, Burst: h.setting.burst, Log: h.recent(), Daily: &h.daily, Learned: h.learned, Pending: h.pending[h.head:]}
	for k := range hours {
		for i, v := range h.bins[k] {
			if v != 0 {
				if st.Bins == nil {
					st.Bins = map[int]map[int]float64{}
				}
				if st.Bins[k] == nil {
					st.Bins[k] = map[int]float64{}
				}
				st.Bins[k][i] = v
			}
		}
		if h.over[k] != 0 {
			if st.Over == nil {
				st.Over = map[int]float64{}
			}
			st.Over[k] = h.over[k]
		}
	}
	from := max(h.dhead-1, 0) // the entry before the window: DemandSince subtracts its sum
	for _, a := range h.demand[from:] {
		st.Demand = append(st.Demand, arrivalState{At: a.at, Cum: a.cum, Jobs: a.jobs})
	}
	st.DHead = h.dhead - from
	return json.Marshal(st)
}

// UnmarshalJSON restores a history saved by MarshalJSON. A history saved
// before histograms were kept by hour keeps its open gaps and demand and
// learns its histograms again.
func (h *GapHistory) UnmarshalJSON(b []byte) error {
	var st gapState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	*h = GapHistory{BootTime: st.BootTime, Reference: st.Reference, weight: st.Weight, seen: st.Seen, due: st.Due, chosen: st.Chosen,
		learned: st.Learned, pending: st.Pending, log: st.Log}
	h.setting.warm, h.setting.prewarm, h.setting.burst = st.Warm, st.Prewarm, st.Burst
	if st.Daily != nil {
		h.daily = *st.Daily
		h.daily.predict(slices.Max(h.daily.Day[:]))
	}
	if len(st.Keep) != 0 && len(st.Keep) != hours {
		return fmt.Errorf("gap history: %d hourly keep-alives, want %d", len(st.Keep), hours)
	}
	copy(h.setting.keep[:], st.Keep)
	for k, bins := range st.Bins {
		if k < 0 || k >= hours {
			return fmt.Errorf("gap history: hour %d out of range", k)
		}
		for i, v := range bins {
			if i < 0 || i >= gapBins {
				return fmt.Errorf("gap history: bin %d out of range", i)
			}
			h.bins[k][i] = v
		}
	}
	for k, v := range st.Over {
		if k < 0 || k >= hours {
			return fmt.Errorf("gap history: hour %d out of range", k)
		}
		h.over[k] = v
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
