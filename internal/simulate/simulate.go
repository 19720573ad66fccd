// Package simulate replays a job trace against a compute cluster on a
// virtual clock, driving the same decisions the live controller makes:
// scheduler.Place assigns queued jobs to idle nodes and autoscaler.Plan
// creates and deletes nodes, with the policy the compute names. A simulated
// provider boots nodes after a boot time and may fail boots or preempt
// low-priority nodes at a rate, from a seeded random source, so a run is
// reproducible; during a capacity outage it refuses creations, and the
// compute backs off as the controller does (autoscaler.Backoff).
//
// The simulation is discrete-event: it jumps from one event (a submit, a
// job's end, a boot, an idle timer) to the next and calls Place and Plan
// once per distinct event time, as the controller does once per loop. To
// replay 82,000 jobs on hundreds of nodes in well under a second it hands
// Place and Plan only the nodes that can matter (the lowest-ID idle nodes
// the queue can take; the idle nodes that may leave) and counts the rest
// (autoscaler.Compute.Counted), which gives the same decisions as listing
// every node; TestSummaryMatchesFullSnapshot checks that.
package simulate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
)

// Config describes one simulation run.
type Config struct {
	// Compute is the compute cluster (min/max instances, idle time, size,
	// tier). Its quota is taken to be its max_instances.
	Compute api.Compute
	// Size is the compute's VM size, for its hourly price.
	Size api.Size
	// Policy names the autoscale policy; empty means the compute's
	// (tide.scale_down_policy, else autoscaler.DefaultPolicy).
	Policy string
	// Policies are the policies by name; nil means
	// autoscaler.BuiltinPolicies.
	Policies autoscaler.Registry
	// BootTime is how long a new node takes to become idle.
	BootTime time.Duration
	// BootFailureRate is the fraction of boots that fail (the node turns
	// unusable and is replaced).
	BootFailureRate float64
	// PreemptionsPerHour is the rate at which a node of a low_priority
	// compute is preempted while it runs a job, per node-hour; the job
	// goes back to the queue and starts over.
	PreemptionsPerHour float64
	// Retries is how many times a preempted job goes back to the queue;
	// preempted once more, it fails, as on the server
	// (tide.retries.on_node_failure). It bounds the work one job can cause
	// however high the preemption rate. 0 means DefaultRetries; -1 none.
	Retries int
	// Seed seeds the random source of boot failures and preemptions.
	Seed uint64
	// CapacityOutage, when its For is > 0, makes every node creation in
	// its window fail with insufficient capacity, as the local location's
	// capacity_unavailable_for does on a server: Plan's creations are
	// refused and the compute backs off as the controller does
	// (autoscaler.Backoff). Nodes that exist keep running.
	CapacityOutage Outage
	// full lists every node to Place and Plan instead of the nodes that
	// matter (tests compare the two).
	full bool
	// SeriesPoints, when > 0, asks for a time series of node and queue
	// counts with at most this many points (for plots).
	SeriesPoints int
}

// Outage is a capacity outage's window in the replay's time.
type Outage struct {
	Start time.Duration // from the trace's start (its first submit)
	For   time.Duration // how long it lasts; 0: no outage
}

// at reports whether capacity is unavailable at t.
func (o Outage) at(t time.Duration) bool { return o.For > 0 && t >= o.Start && t < o.Start+o.For }

// DefaultRetries is the server's default tide.retries.on_node_failure.
const DefaultRetries = 3

// computeKey is the simulated compute's key in Place and Plan.
const computeKey = "c"

// node states in the simulation.
const (
	stPreparing uint8 = iota
	stIdle
	stBusy
	stUnusable
	stPreempted
	stGone
)

type node struct {
	id      string
	state   uint8
	gen     uint32 // bumped on every state change: invalidates queued references
	since   time.Duration
	created time.Duration
	job     int32
}

type job struct {
	Job
	key     string
	queued  bool
	ran     bool
	started time.Duration
	first   time.Duration // first start: the end of its wait
	cold    bool
	nodes   []int32
	epoch   uint32 // bumped when preempted: invalidates its finish event
	tries   int32  // preemptions so far
}

// event kinds.
const (
	evFinish uint8 = iota
	evBoot
	evPreempt
	evWake
)

type event struct {
	at   time.Duration
	kind uint8
	gen  uint32
	idx  int32
}

func (e event) before(o event) bool { return e.at < o.at }

// ref names a node in a given state generation.
type ref struct {
	idx int32
	gen uint32
}

// before orders idle nodes by ID, which is creation order.
func (r ref) before(o ref) bool { return r.idx < o.idx }

// minHeap is a binary min-heap, typed so pushing and popping allocate
// nothing (container/heap boxes every element in an interface).
type minHeap[T interface{ before(T) bool }] []T

func (h *minHeap[T]) push(x T) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].before(a[p]) {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *minHeap[T]) pop() T {
	a := *h
	x := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && a[l].before(a[m]) {
			m = l
		}
		if r := l + 1; r < n && a[r].before(a[m]) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return x
}

type sim struct {
	cfg      Config
	policies autoscaler.Registry
	policy   autoscaler.Policy
	base     time.Time
	rng      *rand.Rand
	jobs     []job
	nodes    []node
	ev       minHeap[event]   // pending events by time
	queue    *scheduler.Queue // queued jobs, keyed by index, Seq the index
	byID     minHeap[ref]     // idle nodes by ID; stale refs skipped
	byIdle   []ref            // idle nodes in the order they became idle; stale refs skipped
	idleHead int
	broken   []int32 // unusable or preempted nodes for Plan to delete
	counts   [stGone]int
	wake     time.Duration // pending wake event; -1 when none
	// placeDirty is set when a job was queued or a node turned idle since
	// the last Place. Nothing else can let Place place more: a second call
	// on what the first left (fewer free nodes, the jobs it did not place)
	// places nothing. The full mode calls Place every time, so the tests
	// check this too.
	placeDirty bool
	caps       map[string]int
	// Buffers reused from call to call.
	nbuf   []scheduler.Node
	popbuf []ref
	cnodes []autoscaler.Node
	cqueue []autoscaler.Demand
	snap   []autoscaler.Compute // one compute, reused
	// memo hands Plan the decision snapshot already asked the policy for:
	// the policy is pure, so asking again would give the same.
	memo *memoPolicy
	gaps *autoscaler.GapHistory
	// backoff is the compute's provisioning back-off, as the controller
	// keeps it (a capacity outage's refused creations start it).
	backoff autoscaler.Backoff

	busyT, idleT, bootT nodeTime
	retries             int
	peak                int
	res                 Result
	waits               []float64
	done                int
	now                 time.Duration
	seriesStep          time.Duration
	series              []Point
}

// Run replays trace against cfg. The trace must have been checked with
// Trace.Fit against cfg.Compute.
func Run(trace *Trace, cfg Config) (Result, error) {
	if len(trace.Jobs) == 0 {
		return Result{}, fmt.Errorf("%s: the trace has no jobs", trace.File)
	}
	s := &sim{cfg: cfg, wake: -1, base: trace.Start, retries: cfg.Retries}
	switch {
	case s.retries == 0:
		s.retries = DefaultRetries
	case s.retries < 0:
		s.retries = 0
	}
	if s.base.IsZero() {
		s.base = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	s.policies = cfg.Policies
	if s.policies == nil {
		s.policies = autoscaler.BuiltinPolicies()
	}
	name := cmp.Or(cfg.Policy, cfg.Compute.ScaleDownPolicy(), autoscaler.DefaultPolicy)
	pol, ok := s.policies[name]
	if !ok {
		return Result{}, fmt.Errorf("policy: unknown autoscale policy %q; known: %v", name, policyNames(s.policies))
	}
	s.cfg.Policy, s.policy = name, pol
	s.memo = &memoPolicy{}
	s.policies = autoscaler.Registry{name: s.memo}
	s.snap = make([]autoscaler.Compute, 1)
	s.caps = map[string]int{computeKey: cfg.Compute.MaxInstances}
	s.queue = scheduler.NewQueue()
	if name == autoscaler.AdaptivePolicy {
		// Only the adaptive policy reads a history; feeding one costs.
		s.gaps = autoscaler.NewGapHistory()
		s.gaps.BootTime = cfg.BootTime
		s.gaps.Reference = time.Duration(cfg.Compute.IdleTimeBeforeScaleDown) * time.Second
	}
	s.rng = rand.New(rand.NewPCG(cfg.Seed, 0x7469646573696d))
	s.jobs = make([]job, len(trace.Jobs))
	for i, j := range trace.Jobs {
		if j.Instances < 1 {
			return Result{}, fmt.Errorf("%s:%d: instance_count unknown; call Trace.Fit first", trace.File, j.Line)
		}
		s.jobs[i] = job{Job: j, key: strconv.Itoa(i)}
	}
	s.waits = make([]float64, 0, len(s.jobs))
	if cfg.SeriesPoints > 0 {
		last := trace.Jobs[len(trace.Jobs)-1]
		span := last.Submit + last.Duration + 4*time.Hour
		s.seriesStep = max(span/time.Duration(cfg.SeriesPoints), time.Second)
	}
	if err := s.loop(); err != nil {
		return Result{}, err
	}
	r := s.result()
	r.Skipped = trace.Skipped
	if err := r.check(trace, cfg); err != nil {
		return Result{}, err
	}
	return r, nil
}

func policyNames(r autoscaler.Registry) []string {
	var out []string
	for k := range r {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// loop processes the events in time order until the last job ends. Node
// time is counted up to then and not beyond: idle timers still running at
// the end belong to the workload that would follow, and cutting there
// treats every policy (and min_instances) alike.
func (s *sim) loop() error {
	next := 0 // next job to arrive
	for s.done < len(s.jobs) {
		if next == len(s.jobs) && len(s.ev) == 0 {
			// Nothing left to happen, yet jobs wait: a bug, never a hang.
			return fmt.Errorf("simulation stalled at %s with %d jobs queued and none running: %w", s.now, s.queue.Len(), ErrSimulatorBug)
		}
		t := time.Duration(math.MaxInt64)
		if next < len(s.jobs) {
			t = s.jobs[next].Submit
		}
		if len(s.ev) > 0 && s.ev[0].at < t {
			t = s.ev[0].at
		}
		s.now = t
		for len(s.ev) > 0 && s.ev[0].at == t {
			e := s.ev.pop()
			s.handle(e)
		}
		arrived := next
		for next < len(s.jobs) && s.jobs[next].Submit == t {
			s.enqueue(int32(next))
			if s.gaps != nil {
				s.gaps.Demand(s.base.Add(t), s.jobs[next].Instances)
			}
			next++
		}
		s.place()
		s.plan()
		// A job that could not start when it was submitted and now waits
		// for booting nodes had a cold start.
		if s.counts[stPreparing] > 0 {
			for k := arrived; k < next; k++ {
				if s.jobs[k].queued {
					s.jobs[k].cold = true
				}
			}
		}
		s.sample()
	}
	return nil
}

// handle applies one event.
func (s *sim) handle(e event) {
	switch e.kind {
	case evFinish:
		j := &s.jobs[e.idx]
		if j.epoch != e.gen {
			return
		}
		s.done++
		for _, n := range j.nodes {
			s.setState(n, stIdle)
		}
		j.nodes = nil
	case evBoot:
		n := &s.nodes[e.idx]
		if n.state != stPreparing {
			return
		}
		if s.cfg.BootFailureRate > 0 && s.rng.Float64() < s.cfg.BootFailureRate {
			s.res.BootFailures++
			s.setState(e.idx, stUnusable)
			return
		}
		s.setState(e.idx, stIdle)
		if s.backoff.Failures > 0 && s.backoff.RecoveredBy(s.base.Add(n.created)) {
			s.backoff = autoscaler.Backoff{} // the controller's recovered
		}
	case evPreempt:
		n := &s.nodes[e.idx]
		if n.state != stBusy || n.gen != e.gen {
			return
		}
		s.res.Preemptions++
		ji := n.job
		j := &s.jobs[ji]
		j.epoch++
		for _, o := range j.nodes {
			if o == e.idx {
				s.setState(o, stPreempted)
			} else {
				s.setState(o, stIdle)
			}
		}
		j.nodes = nil
		j.tries++
		if int(j.tries) > s.retries {
			// Out of retries: the job fails, as on the server.
			s.res.Failed++
			s.done++
			return
		}
		// Back in its place by submit order.
		s.enqueue(ji)
	case evWake:
		if s.wake == e.at {
			s.wake = -1
		}
	}
}

// setState moves node i to state st at s.now, accounting its time.
func (s *sim) setState(i int32, st uint8) {
	n := &s.nodes[i]
	d := s.now - n.since
	switch n.state {
	case stPreparing:
		s.bootT.add(d)
	case stIdle:
		s.idleT.add(d)
	case stBusy:
		s.busyT.add(d)
	default:
		// Unusable and preempted nodes are deleted at once; what little
		// time they have counts as idle.
		s.idleT.add(d)
	}
	s.counts[n.state]--
	was := n.state
	n.state, n.since = st, s.now
	n.gen++
	if st != stGone {
		s.counts[st]++
	}
	switch st {
	case stIdle:
		s.placeDirty = true
		r := ref{i, n.gen}
		s.byID.push(r)
		s.byIdle = append(s.byIdle, r)
		if s.gaps != nil && was == stBusy {
			// A node that ran a job: a booted node goes to the job it
			// was created for, which the history counts as a boot.
			s.gaps.NodeIdle(s.base.Add(s.now))
		}
	case stUnusable, stPreempted:
		s.broken = append(s.broken, i)
	}
}

func (s *sim) live(r ref) bool {
	n := &s.nodes[r.idx]
	return n.gen == r.gen && n.state == stIdle
}

// enqueue queues job ji, by its submit order.
func (s *sim) enqueue(ji int32) {
	j := &s.jobs[ji]
	j.queued = true
	s.queue.Add(scheduler.Job{Key: j.key, Compute: computeKey, Instances: j.Instances, Seq: int64(ji)})
	s.placeDirty = true
}

// place runs Queue.Place on the idle nodes it can take.
func (s *sim) place() {
	if s.queue.Len() == 0 || s.counts[stIdle] == 0 || (!s.placeDirty && !s.cfg.full) {
		return
	}
	s.placeDirty = false
	const key = computeKey
	sizes, _ := s.queue.Demand(key, -1)
	need := 0
	for _, sc := range sizes {
		need += sc.Instances * sc.Jobs
	}
	if sizes[0].Instances > s.counts[stIdle] && !s.cfg.full {
		// No job fits the idle nodes: Place would place nothing.
		return
	}
	// Place hands out free nodes in ID order and never more than the
	// queue needs, so the need lowest-ID idle nodes give the same result
	// as all of them.
	take := min(need, s.counts[stIdle])
	if s.cfg.full {
		take = s.counts[stIdle]
	}
	nodes := s.nbuf[:0]
	popped := s.popbuf[:0]
	for len(popped) < take {
		r := s.byID.pop()
		if !s.live(r) {
			continue
		}
		popped = append(popped, r)
		nodes = append(nodes, scheduler.Node{ID: s.nodes[r.idx].id, Compute: key, State: api.NodeIdle})
	}
	s.nbuf, s.popbuf = nodes, popped
	res, _ := s.queue.Place(nodes, s.caps)
	for _, a := range res.Assignments {
		ji, _ := strconv.Atoi(a.Job)
		s.queue.Remove(a.Job)
		s.start(int32(ji), a.Nodes)
	}
	for _, r := range popped {
		if s.live(r) {
			s.byID.push(r)
		}
	}
}

// start runs job ji on the nodes Place chose.
func (s *sim) start(ji int32, ids []string) {
	j := &s.jobs[ji]
	j.queued = false
	first := !j.ran
	if first {
		j.ran = true
		j.first = s.now
		s.waits = append(s.waits, (s.now - j.Submit).Seconds())
	}
	j.started = s.now
	j.nodes = j.nodes[:0]
	for _, id := range ids {
		i := nodeIndex(id)
		s.setState(i, stBusy)
		s.nodes[i].job = ji
		j.nodes = append(j.nodes, i)
		if s.cfg.PreemptionsPerHour > 0 && s.cfg.Compute.Tier == api.TierLowPriority {
			// Compared as floats: a tiny rate gives a wait beyond
			// time.Duration's range, which would wrap negative.
			after := s.rng.ExpFloat64() / s.cfg.PreemptionsPerHour * float64(time.Hour)
			if after < float64(j.Duration) {
				s.ev.push(event{at: s.now + time.Duration(after), kind: evPreempt, idx: i, gen: s.nodes[i].gen})
			}
		}
	}
	s.ev.push(event{at: s.now + j.Duration, kind: evFinish, idx: ji, gen: j.epoch})
}
