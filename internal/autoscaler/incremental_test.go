package autoscaler_test

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
)

// This file measures and checks the incremental decision: a caller that
// keeps its queue in a scheduler.Queue and its nodes counted per compute,
// with the idle ones in idle order, decides after a few arrivals and
// completions in time proportional to them, and decides exactly what Place
// and Plan decide on the full state.

// incNode is one node of the incremental state.
type incNode struct {
	id, compute, state, job string
	idleSince               time.Time
	busyAt                  int // index in incremental.busy while busy
}

// incCompute is what the incremental state keeps per compute: counts of
// busy nodes, the preparing and broken nodes, and the idle nodes without a
// job, longest idle first (IdleSince, then ID), as Plan walks them.
type incCompute struct {
	busy      int
	preparing []string
	broken    []string
	idle      []*incNode
}

// incremental is a cluster decided incrementally.
type incremental struct {
	computes []autoscaler.Compute
	caps     map[string]int
	queue    *scheduler.Queue
	nodes    map[string]*incNode
	per      map[string]*incCompute
	busy     []string // ids of busy nodes, for picking completions
	free     []scheduler.Node
	seq      int64
	nodeSeq  int
	r        *rand.Rand
}

// newIncremental builds the incremental state from a full one.
func newIncremental(computes []autoscaler.Compute, queue []scheduler.Job, nodes []scheduler.Node, idleSince map[string]time.Time, r *rand.Rand) *incremental {
	s := &incremental{computes: computes, caps: caps(computes), queue: scheduler.NewQueue(),
		nodes: make(map[string]*incNode, len(nodes)), per: make(map[string]*incCompute), r: r}
	for i := range computes {
		s.per[computes[i].Key] = &incCompute{}
	}
	for _, j := range queue {
		s.queue.Add(j)
		s.seq = max(s.seq, j.Seq)
	}
	for _, n := range nodes {
		s.setState(&incNode{id: n.ID, compute: n.Compute}, n.State, n.Job, idleSince[n.ID])
	}
	return s
}

// setState moves node n to state (running job) and keeps the indexes.
func (s *incremental) setState(n *incNode, state, job string, now time.Time) {
	c := s.per[n.compute]
	if old, ok := s.nodes[n.id]; ok {
		switch {
		case old.job != "" || old.state == api.NodeRunning:
			c.busy--
			last := s.nodes[s.busy[len(s.busy)-1]]
			s.busy[old.busyAt], last.busyAt = last.id, old.busyAt
			s.busy = s.busy[:len(s.busy)-1]
		case old.state == api.NodeIdle:
			c.idle = slices.DeleteFunc(c.idle, func(m *incNode) bool { return m == n })
		case old.state == api.NodePreparing:
			c.preparing = slices.DeleteFunc(c.preparing, func(id string) bool { return id == n.id })
		case old.state == api.NodeUnusable || old.state == api.NodePreempted:
			c.broken = slices.DeleteFunc(c.broken, func(id string) bool { return id == n.id })
		}
	}
	if state == "" {
		delete(s.nodes, n.id)
		return
	}
	n.state, n.job = state, job
	s.nodes[n.id] = n
	switch {
	case job != "" || state == api.NodeRunning:
		c.busy++
		n.busyAt = len(s.busy)
		s.busy = append(s.busy, n.id)
	case state == api.NodeIdle:
		n.idleSince = now
		i, _ := slices.BinarySearchFunc(c.idle, n, idleOrder)
		c.idle = slices.Insert(c.idle, i, n)
	case state == api.NodePreparing:
		c.preparing = append(c.preparing, n.id)
	case state == api.NodeUnusable || state == api.NodePreempted:
		c.broken = append(c.broken, n.id)
	}
}

func idleOrder(a, b *incNode) int {
	return cmp.Or(a.idleSince.Compare(b.idleSince), cmp.Compare(a.id, b.id))
}

// churn finishes completions running jobs (their nodes turn idle), lets
// the nodes that were preparing finish booting when boot is set, and queues
// arrivals new jobs with Philly-like sizes.
func (s *incremental) churn(completions, arrivals int, boot bool, now time.Time) {
	if boot {
		for _, c := range s.per {
			for _, id := range slices.Clone(c.preparing) {
				s.setState(s.nodes[id], api.NodeIdle, "", now)
			}
		}
	}
	for range min(completions, len(s.busy)) {
		n := s.nodes[s.busy[s.r.IntN(len(s.busy))]]
		s.setState(n, api.NodeIdle, "", now)
	}
	for range arrivals {
		s.seq++
		prio := 0
		if s.r.IntN(10) == 0 {
			prio = 1
		}
		s.queue.Add(scheduler.Job{Key: "ws/new-" + strconv.FormatInt(s.seq, 10), Compute: s.computes[s.r.IntN(len(s.computes))].Key,
			Instances: philly(s.r), Priority: prio, Seq: s.seq})
	}
}

// decide places the queued jobs on the free nodes with Queue.Place, starts
// them, plans with the nodes counted and the demand counted by size, and
// carries out the plan, as the controller does with the full state.
func (s *incremental) decide(now time.Time, policies autoscaler.Registry) (scheduler.Result, []scheduler.Rest, autoscaler.Result) {
	free := s.free[:0]
	for key, c := range s.per {
		for _, n := range c.idle {
			free = append(free, scheduler.Node{ID: n.id, Compute: key, State: api.NodeIdle})
		}
	}
	s.free = free
	placed, rests := s.queue.Place(free, s.caps)
	for _, a := range placed.Assignments {
		s.queue.Remove(a.Job)
		for _, id := range a.Nodes {
			s.setState(s.nodes[id], api.NodeRunning, a.Job, now)
		}
	}

	snap := autoscaler.Snapshot{Computes: slices.Clone(s.computes)}
	for i := range snap.Computes {
		c := &snap.Computes[i]
		ic := s.per[c.Key]
		c.Counted = autoscaler.NodeCounts{Busy: ic.busy, Preparing: len(ic.preparing)}
		for _, id := range ic.broken {
			c.Nodes = append(c.Nodes, autoscaler.Node{ID: id, State: s.nodes[id].state})
		}
		for _, n := range ic.idle {
			c.Nodes = append(c.Nodes, autoscaler.Node{ID: n.id, State: api.NodeIdle, IdleSince: n.idleSince})
		}
		fit, over := s.queue.Demand(c.Key, c.Cap())
		for _, sc := range fit {
			c.Queued = append(c.Queued, autoscaler.Demand{Instances: sc.Instances, Jobs: sc.Jobs})
		}
		for _, j := range over {
			c.Queued = append(c.Queued, autoscaler.Demand{Job: j.Key, Instances: j.Instances})
		}
	}
	plan := autoscaler.Plan(snap, now, policies)
	for _, a := range plan.Actions {
		switch a.Kind {
		case autoscaler.ActionDelete:
			s.setState(s.nodes[a.Node], "", "", now)
		case autoscaler.ActionCreate:
			for range a.Count {
				s.nodeSeq++
				s.setState(&incNode{id: fmt.Sprintf("%s-new-%d", a.Compute, s.nodeSeq), compute: a.Compute}, api.NodePreparing, "", now)
			}
		}
	}
	return placed, rests, plan
}

// full returns the state as the full decision takes it.
func (s *incremental) full() ([]scheduler.Job, []scheduler.Node, map[string]time.Time) {
	queue := slices.Collect(s.queue.All())
	var nodes []scheduler.Node
	idleSince := make(map[string]time.Time)
	for _, n := range s.nodes {
		nodes = append(nodes, scheduler.Node{ID: n.id, Compute: n.compute, State: n.state, Job: n.job})
		idleSince[n.id] = n.idleSince
	}
	return queue, nodes, idleSince
}

// TestIncrementalMatchesFull runs a cluster decided incrementally through
// arrivals and completions and checks every decision against the full one
// (Place and Plan on every job and node): the same assignments, the same
// reason for every waiting job, the same actions, targets and wake-up.
func TestIncrementalMatchesFull(t *testing.T) {
	policies := autoscaler.BuiltinPolicies()
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 5))
		var computes []autoscaler.Compute
		var nodes []scheduler.Node
		idleSince := map[string]time.Time{}
		now := start.Add(time.Hour)
		for c := range 1 + r.IntN(4) {
			maxN := 4 + r.IntN(30)
			comp := autoscaler.Compute{Key: fmt.Sprintf("c%d", c), Min: r.IntN(3), Max: maxN, QuotaMaxNodes: maxN,
				IdleTimeout: time.Duration(r.IntN(5)) * time.Second, MaxStarting: r.IntN(3)}
			if r.IntN(3) == 0 {
				comp.QuotaMaxNodes = 1 + r.IntN(maxN)
			}
			if r.IntN(3) == 0 {
				comp.Policy = autoscaler.AdaptivePolicy
			}
			computes = append(computes, comp)
			for i := range r.IntN(maxN) {
				n := scheduler.Node{ID: fmt.Sprintf("c%d-n%02d", c, i), Compute: comp.Key}
				switch x := r.IntN(10); {
				case x < 5:
					n.State, n.Job = api.NodeRunning, fmt.Sprintf("old-%d-%d", c, i)
				case x < 8:
					n.State = api.NodeIdle
					idleSince[n.ID] = now.Add(-time.Duration(r.IntN(6)) * time.Second)
				case x < 9:
					n.State = api.NodePreparing
				default:
					n.State = api.NodeUnusable
				}
				nodes = append(nodes, n)
			}
		}
		var queue []scheduler.Job
		for i := range r.IntN(300) {
			queue = append(queue, scheduler.Job{Key: fmt.Sprintf("j%04d", i), Compute: computes[r.IntN(len(computes))].Key,
				Instances: philly(r), Priority: r.IntN(4) / 3, Seq: int64(i)})
		}
		s := newIncremental(computes, queue, nodes, idleSince, r)
		for step := range 40 {
			at := fmt.Sprintf("seed %d step %d", seed, step)
			now = now.Add(time.Second)
			s.churn(r.IntN(6), r.IntN(8), r.IntN(3) == 0, now)
			queue, nodes, idleSince := s.full()
			wantPlaced, wantPlan := decide(computes, queue, nodes, idleSince, now, policies)
			placed, rests, plan := s.decide(now, policies)
			compareDecisions(t, at, queue, wantPlaced, wantPlan, placed, rests, plan)
		}
	}
}

// compareDecisions fails t unless the incremental decision equals the full one.
func compareDecisions(t *testing.T, at string, queue []scheduler.Job, wantPlaced scheduler.Result, wantPlan autoscaler.Result,
	placed scheduler.Result, rests []scheduler.Rest, plan autoscaler.Result) {
	t.Helper()
	sortedAssignments := func(r scheduler.Result) []string {
		var out []string
		for _, a := range r.Assignments {
			out = append(out, fmt.Sprint(a.Job, a.Nodes))
		}
		slices.Sort(out)
		return out
	}
	if got, want := sortedAssignments(placed), sortedAssignments(wantPlaced); !slices.Equal(got, want) {
		t.Fatalf("%s: assignments\n got %v\nwant %v", at, got, want)
	}
	jobs := map[string]scheduler.Job{}
	for _, j := range queue {
		jobs[j.Key] = j
	}
	waits := map[string]scheduler.Waiting{}
	for _, w := range placed.Waiting {
		waits[w.Job] = w
	}
	for _, w := range wantPlaced.Waiting {
		g, ok := waits[w.Job]
		if !ok {
			i := slices.IndexFunc(rests, func(r scheduler.Rest) bool { return r.Compute == w.Compute })
			if i < 0 {
				t.Fatalf("%s: waiting job %s not decided", at, w.Job)
			}
			g = rests[i].Wait(jobs[w.Job])
		}
		if g != w {
			t.Fatalf("%s: job %s waits as %+v, want %+v", at, w.Job, g, w)
		}
	}
	sortedActions := func(r autoscaler.Result) []string {
		var out []string
		for _, a := range r.Actions {
			out = append(out, fmt.Sprintf("%+v", a))
		}
		slices.Sort(out)
		return out
	}
	if got, want := sortedActions(plan), sortedActions(wantPlan); !slices.Equal(got, want) {
		t.Fatalf("%s: actions\n got %v\nwant %v", at, got, want)
	}
	if !maps.Equal(plan.Targets, wantPlan.Targets) || !plan.NextWake.Equal(wantPlan.NextWake) {
		t.Fatalf("%s: targets %v wake %v, want %v wake %v", at, plan.Targets, plan.NextWake, wantPlan.Targets, wantPlan.NextWake)
	}
	if len(plan.Unschedulable) != len(wantPlan.Unschedulable) {
		t.Fatalf("%s: unschedulable %v, want %v", at, plan.Unschedulable, wantPlan.Unschedulable)
	}
}

// BenchmarkDecideIncremental measures one incremental decision on the
// large cluster of BenchmarkDecide (10,000 nodes, 100,000 queued jobs),
// full: each compute is at its max_instances of 200 nodes. 100 running jobs
// finish, the nodes that were booting become idle and 100 jobs arrive; then
// Queue.Place places jobs on the free nodes, Plan plans on the counted
// state, and both are applied. The bookkeeping of the arrivals and
// completions is included in ns/op and left out of decide-ns/op.
func BenchmarkDecideIncremental(b *testing.B) {
	st := newBenchState()
	for i := range st.computes {
		st.computes[i].Max, st.computes[i].QuotaMaxNodes = 200, 200
	}
	s := newIncremental(st.computes, st.queue, st.nodes, st.idleSince, rand.New(rand.NewPCG(9, 9)))
	policies := autoscaler.BuiltinPolicies()
	now := st.now
	for range 3 {
		// Settle: the idle nodes take jobs, broken nodes are replaced.
		now = now.Add(time.Second)
		s.churn(0, 0, true, now)
		s.decide(now, policies)
	}
	b.ReportAllocs()
	var deciding time.Duration
	for b.Loop() {
		now = now.Add(time.Second)
		s.churn(100, 100, true, now)
		t0 := time.Now()
		s.decide(now, policies)
		deciding += time.Since(t0)
	}
	// ns/op is the whole turn; decide-ns/op leaves out the bookkeeping of
	// the arrivals and completions (queueing 100 jobs, freeing 100 nodes).
	b.ReportMetric(float64(deciding.Nanoseconds())/float64(b.N), "decide-ns/op")
}
