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
// idle, whether to boot nodes ahead of the demand that comes every day,
// and how many nodes to boot ahead at a burst's first submit (burst.go).
type candidate struct {
	keep    [hours]time.Duration
	warm    int
	prewarm bool
	burst   int
}

// outcome is what a candidate would have cost over the logged events:
// node seconds idle or booting, and the jobs' waits for nodes, in boot
// times.
type outcome struct {
	cost, wait float64
}

// waiter is a job the replay's queue holds: submitted at, lacking need
// nodes, holding held idle nodes (held since heldSum/held on average).
type waiter struct {
	at         int64
	need, held int
	heldSum    int64
}

// bootBatch is n nodes that finish booting at.
type bootBatch struct {
	at int64
	n  int
}

// replayBuf holds a replay's buffers, reused from replay to replay.
type replayBuf struct {
	stack []int64 // idle nodes' idle-since times, oldest first, from lo
	queue []waiter
	boots []bootBatch
	// cuts are times that split the replay into parts, and at[k] is the
	// outcome so far when the replay reached cuts[k] (the parts' sums).
	cuts []int64
	at   []outcome
	// ref, when set, is the Reference's outcomes at the cuts and in all
	// (node seconds): a replay that can no longer be confident stops.
	ref []outcome
	// bound says whether the warm count ever held back a node in the
	// replay: if not, a larger one replays the same.
	bound bool
}

// replayer is one replay's state.
type replayer struct {
	*replayBuf
	cand           *candidate
	o              outcome
	lo, qh, bh, pi int
	pending, need  int   // nodes booting; nodes the queue lacks
	boot           int64 // boot time, ns
	last           int64 // time of the last look at the pool
	hourFrom, hour int64 // the hour cached by keep, and its timeout
	hourTo         int64
	// warm is the idle nodes kept: the candidate's, or more while a burst
	// is open (until burstEnd) and left of its burst nodes are not asked for.
	warm, left           int
	lastSubmit, burstEnd int64
}

// keep returns the candidate's timeout for the hour of at (hourOf costs
// a division, and events come many to an hour: cached).
func (r *replayer) keep(at int64) int64 {
	if at < r.hourFrom || at >= r.hourTo {
		r.hourFrom = at - ((at%int64(time.Hour))+int64(time.Hour))%int64(time.Hour)
		r.hourTo = r.hourFrom + int64(time.Hour)
		r.hour = int64(r.cand.keep[hourOf(at)])
	}
	return r.hour
}

// look is Plan at t: first the timers that fired since the last look
// (armed with the timeout of the hour they were armed in), then the idle
// nodes beyond the warm ones whose timeout has passed, longest idle first.
func (r *replayer) look(t int64) {
	if len(r.stack)-r.lo > r.warm {
		r.bound = true
	}
	for c := r.last; len(r.stack)-r.lo > r.warm; {
		s := r.stack[r.lo]
		w := max(s+r.keep(c), c)
		if w >= t {
			break
		}
		if w-s >= r.keep(w) {
			r.o.cost += float64(w - s)
			r.lo++
		}
		c = w
	}
	for k := r.keep(t); len(r.stack)-r.lo > r.warm && t-r.stack[r.lo] >= k; r.lo++ {
		r.o.cost += float64(t - r.stack[r.lo])
	}
	if r.lo == len(r.stack) {
		r.stack, r.lo = r.stack[:0], 0
	}
	r.last = t
}

// give hands k nodes that are free at t to the queue, first job first
// (the head holds what it gets until it has all it needs, as
// scheduler.Place does), and returns how many are left for the pool.
func (r *replayer) give(t int64, k int) int {
	for k > 0 && r.qh < len(r.queue) {
		w := &r.queue[r.qh]
		if k < w.need {
			w.need -= k
			r.need -= k
			w.held += k
			w.heldSum += int64(k) * t
			return 0
		}
		k -= w.need
		r.need -= w.need
		r.o.cost += float64(int64(w.held)*t - w.heldSum)
		r.o.wait += float64(t-w.at) / float64(r.boot)
		r.qh++
	}
	if r.qh == len(r.queue) {
		r.queue, r.qh = r.queue[:0], 0
	}
	return k
}

// booted delivers the boots that finish up to t, in order.
func (r *replayer) booted(t int64) {
	for r.bh < len(r.boots) && r.boots[r.bh].at <= t {
		bt := r.boots[r.bh]
		r.bh++
		r.pending -= bt.n
		r.look(bt.at)
		for range r.give(bt.at, bt.n) {
			r.stack = append(r.stack, bt.at)
		}
	}
	if r.bh == len(r.boots) {
		r.boots, r.bh = r.boots[:0], 0
	}
}

// replay runs the logged events under cand the way the controller's turn
// treats them (scheduler.Place, then Plan): a job takes the idle nodes that
// went idle most recently (as the gap histogram assumes) when no job waits
// before it and enough are idle; otherwise it waits in submit order, the
// first waiting job holding the idle nodes it finds, and the nodes the
// queue lacks beyond those booting are booted. A node that turns idle or
// finishes booting goes to the first waiting job, else to the idle pool;
// the longest idle node beyond the warm ones leaves once idle for the
// timeout of the hour Plan looks at it in (at events, boots, and when its
// timer, armed with the timeout of the hour it was armed in, fires). Boots
// still running at the end are let finish, so every job's wait counts.
// (Replays that made each short-of-nodes job pay a whole boot and wait one
// overcharged short timeouts by up to 38 % of their node time on the
// training traces; these match the simulator's node time and waits to
// within 1 % for fixed timeouts up to 120 s and 3 % at 600 s.)
//
// A replay stops early once it costs more than limit.cost node seconds or
// waits more than limit.wait (both only grow); a zero limit is none.
func replay(log []logEvent, cand *candidate, boot time.Duration, buf *replayBuf, limit outcome) outcome {
	maxCost, maxWait := math.Inf(1), math.Inf(1)
	if limit != (outcome{}) {
		maxCost, maxWait = limit.cost*1e9, limit.wait
	}
	if buf == nil {
		buf = &replayBuf{}
	}
	buf.stack, buf.queue, buf.boots = buf.stack[:0], buf.queue[:0], buf.boots[:0]
	buf.at = append(buf.at[:0], make([]outcome, len(buf.cuts))...)
	buf.bound = false
	r := &replayer{replayBuf: buf, cand: cand, boot: max(int64(boot), 1), hourFrom: 1, warm: cand.warm, lastSubmit: math.MinInt64}
	for _, e := range log {
		// An event logged late (a controller turn records what happened
		// since the last one) happened, for the pool, when it was logged.
		e.At = max(e.At, r.last)
		if r.left > 0 && e.At >= r.burstEnd {
			r.left, r.warm = 0, cand.warm
		}
		for r.pi < len(r.cuts) && e.At >= r.cuts[r.pi] {
			r.at[r.pi] = r.o
			r.pi++
			if r.ref != nil && r.hopeless(r.pi) {
				// confident would refuse it. Whether the warm count
				// holds a node back later is not known: say it does.
				r.o.cost, r.bound = math.Inf(1), true
				return r.o
			}
		}
		// (The checks before the calls are their fast paths, inlined: a
		// 1,000,000-job replay makes 850 million of them.)
		if r.bh < len(r.boots) && r.boots[r.bh].at <= e.At {
			r.booted(e.At)
		}
		if len(r.stack)-r.lo > r.warm {
			r.look(e.At)
		} else {
			r.last = e.At
		}
		switch {
		case e.Nodes == 0:
			if r.qh == len(r.queue) || r.give(e.At, 1) == 1 {
				r.stack = append(r.stack, e.At)
			}
			continue
		case e.Nodes < 0:
			// Booted ahead: idle from the predicted minute on, and held
			// (as warm nodes) through it: its timer starts at the
			// minute's end, its idle time is counted from the start.
			held := int64(time.Minute)
			r.o.cost += float64(-e.Nodes) * float64(r.boot+held)
			for range -e.Nodes {
				r.stack = append(r.stack, e.At+held)
			}
			continue
		}
		n := e.Nodes
		start := cand.burst > 0 && r.lastSubmit != math.MinInt64 && e.At-r.lastSubmit >= r.boot
		r.lastSubmit = e.At
		if start {
			r.left, r.burstEnd = cand.burst+n, e.At+r.boot
		}
		r.left = max(r.left-n, 0)
		free := len(r.stack) - r.lo
		if r.qh == len(r.queue) && free >= n {
			for _, s := range r.stack[len(r.stack)-n:] {
				r.o.cost += float64(e.At - s)
			}
			r.stack = r.stack[:len(r.stack)-n]
		} else {
			w := waiter{at: e.At, need: n}
			if r.qh == len(r.queue) {
				// The head holds the idle nodes there are.
				for _, s := range r.stack[r.lo:] {
					r.o.cost += float64(e.At - s)
				}
				w.held = free
				w.heldSum = int64(free) * e.At
				w.need -= free
				r.stack, r.lo = r.stack[:0], 0
			}
			r.queue = append(r.queue, w)
			r.need += w.need
		}
		// Plan's target: the queue's lack, and while a burst is open the
		// nodes booted ahead for it that its jobs have not asked for yet,
		// beyond the idle and booting nodes.
		if create := r.need + r.left - (len(r.stack) - r.lo) - r.pending; create > 0 {
			r.boots = append(r.boots, bootBatch{e.At + r.boot, create})
			r.pending += create
			r.o.cost += float64(create) * float64(r.boot)
		}
		if r.left > 0 {
			r.warm = max(cand.warm, r.left)
		} else {
			r.warm = cand.warm
		}
		if r.o.cost > maxCost || r.o.wait > maxWait {
			break
		}
	}
	if len(log) > 0 && r.o.cost <= maxCost && r.o.wait <= maxWait {
		end := r.last
		for _, s := range r.stack[r.lo:] {
			r.o.cost += float64(min(end-s, r.keep(end)))
		}
		// The jobs still waiting get the boots still running.
		for r.bh < len(r.boots) {
			bt := r.boots[r.bh]
			r.bh++
			r.give(bt.at, bt.n)
		}
	}
	for ; r.pi < len(r.cuts); r.pi++ {
		r.at[r.pi] = r.o
	}
	for k := range r.at {
		r.at[k].cost /= 1e9
	}
	r.o.cost /= 1e9
	return r.o
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
// costs no more node time and makes jobs wait no longer in all than the
// Reference, with the largest gain: the smaller of the relative node time
// saved and the relative wait saved, so that both fall; the Reference when
// none does with confidence (confidence.go).
func (h *GapHistory) bestSetting() candidate {
	ref := candidate{}
	for k := range ref.keep {
		ref.keep[k] = h.Reference
	}
	log := h.recent()
	buf := &h.buf
	buf.cutLog(log, h.BootTime)
	r := replay(log, &ref, h.BootTime, buf, outcome{})
	refParts := append(slices.Clone(buf.at), r)
	buf.ref = refParts
	defer func() { buf.ref = nil }()
	// Pre-warming candidates are judged day by day too (dayCuts): the
	// Reference's outcomes at midnight, replayed when the first is.
	eventCuts := slices.Clone(buf.cuts)
	var days []int64
	var refDays []outcome
	best, gain := ref, -1.0
	cv := h.curves()
	boot := max(h.BootTime.Seconds(), 1)
	ahead := h.daily.bootsAhead(log, h.BootTime)
	bursts := burstSizes(log, h.BootTime)
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
		var same [2]bool // a larger warm count replays the same, without and with booting ahead
		for i := range len(warms) + len(bursts) {
			// Each warm count, then each burst size without warm nodes.
			w, b := 0, 0
			if i < len(warms) {
				w = warms[i]
			} else {
				b = bursts[i-len(warms)]
				same = [2]bool{}
			}
			for p, pre := range []bool{false, true} {
				if pre && len(ahead) == len(log) || same[p] {
					continue // nothing to boot ahead, or nothing new to replay
				}
				c.warm, c.prewarm, c.burst = w, pre, b
				events := log
				if pre {
					events = ahead
				}
				// Only a candidate that gains more than the best so far
				// (and at least minGain) on both can be taken: a replay
				// that passes those bounds stops there.
				need := max(gain, minGain)
				limit := outcome{r.cost - need*max(r.cost, 1), r.wait - need*max(r.wait, 1)}
				if limit.cost < 0 || limit.wait < 0 {
					return best // nothing can gain that much
				}
				buf.cuts, buf.ref = eventCuts, refParts
				o := replay(events, &c, h.BootTime, buf, limit)
				same[p] = !buf.bound && b == 0
				ok := o.cost <= limit.cost && o.wait <= limit.wait && confident(buf, o, refParts)
				if !ok && pre && !math.IsInf(o.cost, 1) && (o.cost > limit.cost || o.wait > limit.wait) {
					continue // its totals gain too little, however cut
				}
				if !ok && pre {
					// Its gain comes once a day: judged day by day too.
					if refDays == nil {
						days = dayCuts(log)
						buf.cuts, buf.ref = days, nil
						rd := replay(log, &ref, h.BootTime, buf, outcome{})
						refDays = append(slices.Clone(buf.at), rd)
					}
					if len(days) > 0 {
						buf.cuts, buf.ref = days, refDays
						o = replay(events, &c, h.BootTime, buf, limit)
						ok = o.cost <= limit.cost && o.wait <= limit.wait && confident(buf, o, refDays)
					}
				}
				if !ok {
					continue
				}
				if g := min((r.cost-o.cost)/max(r.cost, 1), (r.wait-o.wait)/max(r.wait, 1)); g > gain {
					best, gain = c, g
				}
			}
		}
	}
	return best
}
