package autoscaler

import (
	"math"
	"slices"
	"time"
)

// logSize is how many recent events (nodes turning idle, submits) the
// history keeps to replay candidate settings on.
const logSize = 4096

// logEvent is a node turning idle (nodes 0) or a submit of nodes nodes, at
// Unix nanoseconds; in a replay only, negative nodes are -nodes booted
// ahead of predicted demand.
type logEvent struct {
	At    int64 `json:"t"`
	Nodes int   `json:"n,omitempty"`
}

// candidate is a setting the policy may choose: each hour's idle timeout,
// how many of the most recently idle nodes stay however long they are
// idle, and whether to boot nodes ahead of the demand that comes every day.
type candidate struct {
	keep    [hours]time.Duration
	warm    int
	prewarm bool
}

// outcome is what a candidate would have cost over the logged events:
// node seconds idle or booting, and jobs that waited for a boot.
type outcome struct {
	cost, miss float64
}

// replay runs the logged events through an idle pool under cand, the way
// Plan treats idle nodes: a job takes the nodes that went idle most
// recently (as the gap histogram assumes); the longest idle node beyond
// the warm ones leaves once idle for the timeout of the hour Plan looks at
// it in (at events and when its timer, armed with the timeout of the hour
// it was armed in, fires); a job that finds too few nodes holds those it
// finds while the rest boot, and waits.
//
// A replay stops early once it costs more than limit.cost node seconds or
// makes more than limit.miss jobs wait (both only grow); a zero limit is
// none.
func replay(log []logEvent, cand *candidate, boot time.Duration, stack []int64, limit outcome) (outcome, []int64) {
	maxCost, maxMiss := math.Inf(1), math.Inf(1)
	if limit != (outcome{}) {
		maxCost, maxMiss = limit.cost*1e9, limit.miss
	}
	var o outcome
	stack = stack[:0]
	lo := 0
	b := int64(boot)
	// The hour's timeout, cached for the hour last asked (hourOf costs a
	// division, and events come many to an hour).
	var hourFrom, hourTo int64 = 1, 0
	var hourKeep int64
	keep := func(at int64) int64 {
		if at < hourFrom || at >= hourTo {
			hourFrom = at - ((at%int64(time.Hour))+int64(time.Hour))%int64(time.Hour)
			hourTo = hourFrom + int64(time.Hour)
			hourKeep = int64(cand.keep[hourOf(at)])
		}
		return hourKeep
	}
	var last int64 // time of the last look at the pool
	for _, e := range log {
		// Timers that fire before the event.
		for c := last; len(stack)-lo > cand.warm; {
			s := stack[lo]
			w := max(s+keep(c), c)
			if w >= e.At {
				break
			}
			if w-s >= keep(w) {
				o.cost += float64(w - s)
				lo++
			}
			c = w
		}
		// Plan at the event.
		for t := keep(e.At); len(stack)-lo > cand.warm && e.At-stack[lo] >= t; lo++ {
			o.cost += float64(e.At - stack[lo])
		}
		last = e.At
		if e.Nodes == 0 {
			stack = append(stack, e.At)
			continue
		}
		if e.Nodes < 0 {
			// Booted ahead: idle from the predicted minute on, and held
			// (as warm nodes) through it: its timer starts at the
			// minute's end, its idle time is counted from the start.
			held := int64(time.Minute)
			o.cost += float64(-e.Nodes) * float64(b+held)
			for range -e.Nodes {
				stack = append(stack, e.At+held)
			}
			continue
		}
		n := e.Nodes
		if free := len(stack) - lo; free < n {
			// The job holds the free nodes while the rest boot.
			o.miss++
			o.cost += float64(n) * float64(b)
			for _, s := range stack[lo:] {
				o.cost += float64(e.At - s)
			}
			stack = stack[:lo]
		} else {
			for _, s := range stack[len(stack)-n:] {
				o.cost += float64(e.At - s)
			}
			stack = stack[:len(stack)-n]
		}
		if lo == len(stack) {
			stack, lo = stack[:0], 0
		}
		if o.cost > maxCost || o.miss > maxMiss {
			o.cost /= 1e9
			return o, stack
		}
	}
	if len(log) > 0 {
		end := log[len(log)-1].At
		for _, s := range stack[lo:] {
			o.cost += float64(min(end-s, keep(end)))
		}
	}
	o.cost /= 1e9
	return o, stack
}

// hourOf returns the hour of the day (UTC) of Unix nanoseconds ns.
func hourOf(ns int64) int {
	h := (ns / int64(time.Hour)) % hours
	if h < 0 {
		h += hours
	}
	return int(h)
}

// record appends e to the log, dropping the oldest events beyond logSize.
func (h *GapHistory) record(e logEvent) {
	if len(h.log) >= 2*logSize {
		h.log = append(h.log[:0], h.log[len(h.log)-logSize:]...)
	}
	h.log = append(h.log, e)
}

// recent returns the last logSize events.
func (h *GapHistory) recent() []logEvent {
	return h.log[max(0, len(h.log)-logSize):]
}

// lambdas are the exchange rates, in boot times of waiting per boot time
// of node time, the candidates' hourly timeouts are chosen at.
var lambdas = [...]float64{0, 0.1, 0.3, 1, 3, 10}

// warms are the numbers of recently idle nodes the candidates keep.
var warms = [...]int{0, 1, 2, 4, 8, 16, 32}

// bestSetting replays the logged events under the Reference idle time and
// under candidates (hourly timeouts from the gap histograms at several
// exchange rates, each with several warm counts, each with and without
// booting ahead of the demand that comes every day) and returns the one that
// costs no more node time and makes no more jobs wait than the Reference,
// with the largest gain: the smaller of the relative node time saved and
// the relative waits saved, so that both fall; the Reference when none
// does.
func (h *GapHistory) bestSetting() candidate {
	ref := candidate{}
	for k := range ref.keep {
		ref.keep[k] = h.Reference
	}
	log := h.recent()
	r, stack := replay(log, &ref, h.BootTime, nil, outcome{})
	best, gain := ref, -1.0
	cv := h.curves()
	boot := max(h.BootTime.Seconds(), 1)
	ahead := h.daily.bootsAhead(log, h.BootTime)
	var tried [][hours]int
	for _, l := range lambdas {
		idx, _, _ := choose(cv, boot, l)
		if slices.Contains(tried, idx) {
			continue // another rate chose the same timeouts
		}
		tried = append(tried, idx)
		var c candidate
		for k := range idx {
			c.keep[k] = binEdge(idx[k])
		}
		for _, w := range warms {
			for _, pre := range []bool{false, true} {
				if pre && len(ahead) == len(log) {
					continue // nothing to boot ahead
				}
				c.warm, c.prewarm = w, pre
				events := log
				if pre {
					events = ahead
				}
				var o outcome
				o, stack = replay(events, &c, h.BootTime, stack, r)
				if o.cost > r.cost || o.miss > r.miss || (o.cost == r.cost && o.miss == r.miss) {
					continue
				}
				g := min((r.cost-o.cost)/max(r.cost, 1), (r.miss-o.miss)/max(r.miss, 1))
				if g > gain {
					best, gain = c, g
				}
			}
		}
	}
	return best
}
