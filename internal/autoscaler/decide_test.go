package autoscaler_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
)

// This file drives scheduler.Place and autoscaler.Plan together the way the
// controller does: Place, mark the assigned nodes busy, Plan with the jobs
// still waiting, apply. The test package imports both; the packages
// themselves stay independent.

var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// decide runs Place then Plan on the given state, as the controller would.
func decide(computes []autoscaler.Compute, queue []scheduler.Job, nodes []scheduler.Node, idleSince map[string]time.Time, now time.Time, policies autoscaler.Registry) (scheduler.Result, autoscaler.Result) {
	placed := scheduler.Place(queue, nodes, caps(computes))
	return placed, autoscaler.Plan(snapshot(computes, nodes, idleSince, placed), now, policies)
}

// caps returns each compute's cap, the maxNodes of scheduler.Place.
func caps(computes []autoscaler.Compute) map[string]int {
	m := make(map[string]int, len(computes))
	for i := range computes {
		m[computes[i].Key] = computes[i].Cap()
	}
	return m
}

// snapshot builds Plan's input from the nodes and Place's result: the nodes
// Place assigned are busy and the jobs still waiting are the queued demand.
func snapshot(computes []autoscaler.Compute, nodes []scheduler.Node, idleSince map[string]time.Time, placed scheduler.Result) autoscaler.Snapshot {
	index := make(map[string]int, len(computes))
	snap := autoscaler.Snapshot{Computes: slices.Clone(computes)}
	for i := range snap.Computes {
		index[computes[i].Key] = i
		snap.Computes[i].Nodes, snap.Computes[i].Queued = nil, nil
	}
	assigned := make(map[string]string)
	for _, a := range placed.Assignments {
		for _, id := range a.Nodes {
			assigned[id] = a.Job
		}
	}
	for _, n := range nodes {
		c := &snap.Computes[index[n.Compute]]
		job := n.Job
		if j, ok := assigned[n.ID]; ok {
			job = j
		}
		c.Nodes = append(c.Nodes, autoscaler.Node{ID: n.ID, State: n.State, Job: job, IdleSince: idleSince[n.ID]})
	}
	for _, w := range placed.Waiting {
		c := &snap.Computes[index[w.Compute]]
		c.Queued = append(c.Queued, autoscaler.Demand{Job: w.Job, Instances: w.Need})
	}
	return snap
}

// philly returns a job size drawn like the Philly trace: 93% one node, ~2%
// eight nodes, the rest two to four.
func philly(r *rand.Rand) int {
	switch x := r.IntN(100); {
	case x < 93:
		return 1
	case x < 95:
		return 8
	default:
		return 2 + r.IntN(3)
	}
}

// simJob is a job of the simulation.
type simJob struct {
	key, compute string
	size, prio   int
	seq          int64
	runFor       int // steps
	started      bool
	end          int // step the job finishes, once started
	done         bool
}

// simNode is a node of the simulation.
type simNode struct {
	id, compute, state, job string
	idleSince               time.Time
	readyAt                 int // step a preparing node becomes idle
}

// sim is a cluster on a virtual clock of 10s steps, driven by decide.
type sim struct {
	r        *rand.Rand
	computes []autoscaler.Compute
	jobs     []*simJob
	nodes    []*simNode
	nodeSeq  int
	failures bool // idle nodes may turn unusable and running ones be preempted
}

const simStep = 10 * time.Second

// submit queues a job.
func (s *sim) submit(compute string, size, prio, runFor int) *simJob {
	j := &simJob{key: fmt.Sprintf("j%d", len(s.jobs)), compute: compute, size: size, prio: prio,
		seq: int64(len(s.jobs)), runFor: runFor}
	s.jobs = append(s.jobs, j)
	return j
}

// cap returns the cap of the compute named key.
func (s *sim) cap(key string) int {
	for i := range s.computes {
		if s.computes[i].Key == key {
			return s.computes[i].Cap()
		}
	}
	return 0
}

// step advances the simulation to step st: nodes boot, jobs finish, a
// failure may happen, then Place and Plan run and their decisions are
// applied. It returns an error when a decision breaks an invariant.
func (s *sim) step(st int, policies autoscaler.Registry) error {
	now := start.Add(time.Duration(st) * simStep)
	for _, n := range s.nodes {
		if n.state == api.NodePreparing && n.readyAt <= st {
			n.state, n.idleSince = api.NodeIdle, now
		}
	}
	for _, j := range s.jobs {
		if j.started && !j.done && j.end <= st {
			j.done = true
			s.release(j.key, now)
		}
	}
	if s.failures && len(s.nodes) > 0 && s.r.IntN(20) == 0 {
		n := s.nodes[s.r.IntN(len(s.nodes))]
		switch n.state {
		case api.NodeIdle, api.NodePreparing:
			n.state = api.NodeUnusable
		case api.NodeRunning:
			// Preemption: the job goes back to the queue under its own
			// sequence and its other nodes turn idle.
			key := n.job
			s.release(key, now)
			n.state = api.NodePreempted
			for _, j := range s.jobs {
				if j.key == key {
					j.started = false
				}
			}
		}
	}

	var queue []scheduler.Job
	byKey := map[string]*simJob{}
	for _, j := range s.jobs {
		byKey[j.key] = j
		if !j.started {
			queue = append(queue, scheduler.Job{Key: j.key, Compute: j.compute, Instances: j.size, Priority: j.prio, Seq: j.seq})
		}
	}
	var nodes []scheduler.Node
	idleSince := map[string]time.Time{}
	byID := map[string]*simNode{}
	for _, n := range s.nodes {
		nodes = append(nodes, scheduler.Node{ID: n.id, Compute: n.compute, State: n.state, Job: n.job})
		idleSince[n.id] = n.idleSince
		byID[n.id] = n
	}
	placed, plan := decide(s.computes, queue, nodes, idleSince, now, policies)

	for _, a := range placed.Assignments {
		j := byKey[a.Job]
		if j.size > s.cap(j.compute) {
			return fmt.Errorf("job %s of %d nodes placed on compute %s of cap %d", j.key, j.size, j.compute, s.cap(j.compute))
		}
		j.started, j.end = true, st+j.runFor
		for _, id := range a.Nodes {
			n := byID[id]
			if n.state != api.NodeIdle || n.job != "" || n.compute != j.compute {
				return fmt.Errorf("job %s placed on node %+v", j.key, *n)
			}
			n.state, n.job = api.NodeRunning, j.key
		}
	}
	for _, a := range plan.Actions {
		switch a.Kind {
		case autoscaler.ActionDelete:
			n := byID[a.Node]
			if n.job != "" {
				return fmt.Errorf("deleted node %s running %s", n.id, n.job)
			}
			s.nodes = slices.DeleteFunc(s.nodes, func(m *simNode) bool { return m == n })
		case autoscaler.ActionCreate:
			for range a.Count {
				s.nodeSeq++
				s.nodes = append(s.nodes, &simNode{id: fmt.Sprintf("n%d", s.nodeSeq), compute: a.Compute,
					state: api.NodePreparing, readyAt: st + 1 + s.r.IntN(3)})
			}
		}
	}
	for _, u := range plan.Unschedulable {
		if byKey[u.Job].size <= u.Cap {
			return fmt.Errorf("job %s reported unschedulable but fits cap %d", u.Job, u.Cap)
		}
	}
	for _, c := range s.computes {
		count, preparing := s.count(c.Key), s.countState(c.Key, api.NodePreparing)
		// Below min_instances only while max_starting_nodes nodes start.
		rateLimited := c.MaxStarting > 0 && preparing == c.MaxStarting
		if count > c.Cap() || (count < min(c.Min, c.Cap()) && !rateLimited) {
			return fmt.Errorf("compute %s has %d nodes (%d starting), outside [min %d, cap %d]", c.Key, count, preparing, c.Min, c.Cap())
		}
		if c.MaxStarting > 0 && preparing > c.MaxStarting {
			return fmt.Errorf("compute %s has %d nodes starting, more than max_starting_nodes %d", c.Key, preparing, c.MaxStarting)
		}
	}
	return nil
}

// release frees the nodes of job key.
func (s *sim) release(key string, now time.Time) {
	for _, n := range s.nodes {
		if n.job == key {
			n.state, n.job, n.idleSince = api.NodeIdle, "", now
		}
	}
}

// count returns the number of nodes of compute key.
func (s *sim) count(key string) int {
	count := 0
	for _, n := range s.nodes {
		if n.compute == key {
			count++
		}
	}
	return count
}

// countState returns the number of nodes of compute key in state.
func (s *sim) countState(key, state string) int {
	count := 0
	for _, n := range s.nodes {
		if n.compute == key && n.state == state {
			count++
		}
	}
	return count
}

// settled reports whether every job that fits its compute has finished and
// every compute is back at min_instances.
func (s *sim) settled() bool {
	for _, j := range s.jobs {
		if j.size <= s.cap(j.compute) && !j.done {
			return false
		}
	}
	for _, c := range s.computes {
		if s.count(c.Key) != min(c.Min, c.Cap()) {
			return false
		}
	}
	return true
}

// TestNoStarvation simulates random clusters (arrivals for a while, jobs
// that run for a few steps, nodes that boot for a few steps, failures and
// preemptions) and checks that the invariants hold at every step, that every
// job that fits its compute eventually runs, that no impossible job runs and
// that every compute shrinks back to min_instances.
func TestNoStarvation(t *testing.T) {
	policies := autoscaler.BuiltinPolicies()
	for seed := range uint64(300) {
		s := &sim{r: rand.New(rand.NewPCG(seed, 99)), failures: true}
		for c := range 1 + s.r.IntN(3) {
			maxN := 1 + s.r.IntN(12)
			comp := autoscaler.Compute{Key: fmt.Sprintf("c%d", c), Min: s.r.IntN(min(maxN, 3) + 1), Max: maxN,
				QuotaMaxNodes: maxN, IdleTimeout: time.Duration(s.r.IntN(7)) * simStep}
			if s.r.IntN(4) == 0 {
				comp.QuotaMaxNodes = 1 + s.r.IntN(maxN)
			}
			if s.r.IntN(3) == 0 {
				comp.MaxStarting = 1 + s.r.IntN(3) // tide.max_starting_nodes
			}
			s.computes = append(s.computes, comp)
		}
		arrivalSteps := 50 + s.r.IntN(100)
		st := 0
		for ; st < 5000; st++ {
			if st < arrivalSteps {
				for range s.r.IntN(3) {
					size := philly(s.r)
					if s.r.IntN(200) == 0 {
						size = 20 // more than any cap: must be reported, never run
					}
					s.submit(s.computes[s.r.IntN(len(s.computes))].Key, size, s.r.IntN(3)/2, 1+s.r.IntN(8))
				}
			}
			s.failures = st < arrivalSteps
			if err := s.step(st, policies); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, st, err)
			}
			if st >= arrivalSteps && s.settled() {
				break
			}
		}
		if !s.settled() {
			var stuck []string
			for _, j := range s.jobs {
				if !j.done {
					stuck = append(stuck, fmt.Sprintf("%s(size %d on %s, started %v)", j.key, j.size, j.compute, j.started))
				}
			}
			t.Fatalf("seed %d: not settled after %d steps; computes %+v; unfinished %v", seed, st, s.computes, stuck)
		}
	}
}

// TestReservationPreventsStarvation keeps a compute saturated with a steady
// stream of one-node jobs and checks that an eight-node job submitted
// first still starts within a bounded time, while the stream goes on.
// Without the reservation the one-node jobs would take every node the
// moment it turns idle and the gang would wait for as long as they arrive.
func TestReservationPreventsStarvation(t *testing.T) {
	policies := autoscaler.BuiltinPolicies()
	s := &sim{r: rand.New(rand.NewPCG(1, 1)),
		computes: []autoscaler.Compute{{Key: "gpu", Max: 8, QuotaMaxNodes: 8, IdleTimeout: time.Minute}}}
	// Saturate first, then submit the gang.
	for st := range 10 {
		s.submit("gpu", 1, 0, 4)
		s.submit("gpu", 1, 0, 4)
		if err := s.step(st, policies); err != nil {
			t.Fatal(err)
		}
	}
	gang := s.submit("gpu", 8, 0, 3)
	for st := 10; st < 200; st++ {
		s.submit("gpu", 1, 0, 4)
		s.submit("gpu", 1, 0, 4)
		if err := s.step(st, policies); err != nil {
			t.Fatal(err)
		}
		if gang.started || gang.done {
			if st > 20 {
				t.Fatalf("gang started only at step %d, want within 10 steps of its submission", st)
			}
			return
		}
	}
	t.Fatal("the 8-node job never started while one-node jobs kept arriving")
}

// benchState is a large cluster for the benchmarks: 50 computes, 10,000
// nodes and 100,000 queued jobs with Philly-like sizes.
type benchState struct {
	computes  []autoscaler.Compute
	queue     []scheduler.Job
	nodes     []scheduler.Node
	idleSince map[string]time.Time
	now       time.Time
}

func newBenchState() benchState {
	const computes, nodesPer, jobs = 50, 200, 100_000
	r := rand.New(rand.NewPCG(7, 7))
	s := benchState{idleSince: make(map[string]time.Time, computes*nodesPer), now: start.Add(time.Hour)}
	for c := range computes {
		key := fmt.Sprintf("ws/cluster-%02d", c)
		s.computes = append(s.computes, autoscaler.Compute{Key: key, Min: 0, Max: 400, QuotaMaxNodes: 400, IdleTimeout: 120 * time.Second})
		for i := range nodesPer {
			n := scheduler.Node{ID: fmt.Sprintf("%s-node-%04d", key, i), Compute: key}
			switch x := r.IntN(100); {
			case x < 55:
				n.State, n.Job = api.NodeRunning, fmt.Sprintf("ws/running-%d-%d", c, i)
			case x < 90:
				n.State = api.NodeIdle
				s.idleSince[n.ID] = s.now.Add(-time.Duration(r.IntN(300)) * time.Second)
			case x < 97:
				n.State = api.NodePreparing
			case x < 98:
				n.State = api.NodeLeaving
			case x < 99:
				n.State = api.NodeUnusable
			default:
				n.State = api.NodePreempted
			}
			s.nodes = append(s.nodes, n)
		}
	}
	for i := range jobs {
		prio := 0
		if r.IntN(10) == 0 {
			prio = 1
		}
		s.queue = append(s.queue, scheduler.Job{Key: fmt.Sprintf("ws/job-%06d", i), Compute: s.computes[r.IntN(computes)].Key,
			Instances: philly(r), Priority: prio, Seq: int64(i)})
	}
	return s
}

// BenchmarkDecide measures one full controller decision: Place, the glue
// that turns its result into a snapshot, and Plan.
func BenchmarkDecide(b *testing.B) {
	s := newBenchState()
	policies := autoscaler.BuiltinPolicies()
	b.ReportAllocs()
	for b.Loop() {
		decide(s.computes, s.queue, s.nodes, s.idleSince, s.now, policies)
	}
}

// BenchmarkPlace measures scheduler.Place alone on the large cluster.
func BenchmarkPlace(b *testing.B) {
	s := newBenchState()
	m := caps(s.computes)
	b.ReportAllocs()
	for b.Loop() {
		scheduler.Place(s.queue, s.nodes, m)
	}
}

// BenchmarkPlan measures autoscaler.Plan alone on the snapshot the large
// cluster gives after placement.
func BenchmarkPlan(b *testing.B) {
	s := newBenchState()
	policies := autoscaler.BuiltinPolicies()
	snap := snapshot(s.computes, s.nodes, s.idleSince, scheduler.Place(s.queue, s.nodes, caps(s.computes)))
	b.ReportAllocs()
	for b.Loop() {
		autoscaler.Plan(snap, s.now, policies)
	}
}

// BenchmarkDecideShuffled is BenchmarkDecide with the queue in random order
// instead of submit order, the worst case for the queue sort.
func BenchmarkDecideShuffled(b *testing.B) {
	s := newBenchState()
	r := rand.New(rand.NewPCG(8, 8))
	r.Shuffle(len(s.queue), func(i, j int) { s.queue[i], s.queue[j] = s.queue[j], s.queue[i] })
	policies := autoscaler.BuiltinPolicies()
	b.ReportAllocs()
	for b.Loop() {
		decide(s.computes, s.queue, s.nodes, s.idleSince, s.now, policies)
	}
}
