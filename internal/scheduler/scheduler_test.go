package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// idle returns free nodes of compute c named c-1 .. c-n.
func idle(c string, n int) []Node {
	return nodesIn(c, api.NodeIdle, 1, n)
}

// nodesIn returns nodes of compute c in state, named c-from .. c-(from+n-1).
func nodesIn(c, state string, from, n int) []Node {
	var out []Node
	for i := from; i < from+n; i++ {
		out = append(out, Node{ID: fmt.Sprintf("%s-%02d", c, i), Compute: c, State: state})
	}
	return out
}

// describe renders a Result compactly for table comparisons:
// "job=node,node" for assignments and "job:Reason[@head]" for waiting jobs.
func describe(r Result) (assigned, waiting []string) {
	for _, a := range r.Assignments {
		assigned = append(assigned, a.Job+"="+strings.Join(a.Nodes, ","))
	}
	for _, w := range r.Waiting {
		s := w.Job + ":" + string(w.Reason)
		if w.Head != "" {
			s += "@" + w.Head
		}
		waiting = append(waiting, s)
	}
	return assigned, waiting
}

func TestPlace(t *testing.T) {
	cat := func(parts ...[]Node) []Node { return slices.Concat(parts...) }
	tests := []struct {
		name     string
		queue    []Job
		nodes    []Node
		max      map[string]int
		assigned []string
		waiting  []string
	}{
		{
			name: "empty",
		},
		{
			name:     "one job on one idle node",
			queue:    []Job{{Key: "j1", Compute: "a", Instances: 1, Seq: 1}},
			nodes:    idle("a", 1),
			assigned: []string{"j1=a-01"},
		},
		{
			name:    "no nodes yet: scale from zero waits",
			queue:   []Job{{Key: "j1", Compute: "a", Instances: 1, Seq: 1}},
			waiting: []string{"j1:InsufficientNodes"},
		},
		{
			name:     "instances below one count as one",
			queue:    []Job{{Key: "j1", Compute: "a", Instances: 0, Seq: 1}},
			nodes:    idle("a", 2),
			assigned: []string{"j1=a-01"},
		},
		{
			name:    "gang waits for all its nodes",
			queue:   []Job{{Key: "g", Compute: "a", Instances: 4, Seq: 1}},
			nodes:   idle("a", 3),
			waiting: []string{"g:InsufficientNodes"},
		},
		{
			name:     "gang gets exactly its nodes, of its compute only",
			queue:    []Job{{Key: "g", Compute: "a", Instances: 3, Seq: 1}},
			nodes:    cat(idle("b", 5), idle("a", 4)),
			assigned: []string{"g=a-01,a-02,a-03"},
		},
		{
			name:  "only idle nodes without a job are used",
			queue: []Job{{Key: "j1", Compute: "a", Instances: 1, Seq: 1}, {Key: "j2", Compute: "a", Instances: 1, Seq: 2}},
			nodes: cat(nodesIn("a", api.NodeRunning, 1, 1), nodesIn("a", api.NodePreparing, 2, 1),
				nodesIn("a", api.NodeLeaving, 3, 1), nodesIn("a", api.NodeUnusable, 4, 1),
				nodesIn("a", api.NodePreempted, 5, 1), []Node{{ID: "a-06", Compute: "a", State: api.NodeIdle, Job: "x"}},
				nodesIn("a", api.NodeIdle, 7, 1)),
			assigned: []string{"j1=a-07"},
			waiting:  []string{"j2:InsufficientNodes"},
		},
		{
			name: "higher priority first, whatever its submit order",
			queue: []Job{
				{Key: "low", Compute: "a", Instances: 1, Priority: 0, Seq: 1},
				{Key: "high", Compute: "a", Instances: 1, Priority: 5, Seq: 2},
			},
			nodes:    idle("a", 1),
			assigned: []string{"high=a-01"},
			waiting:  []string{"low:InsufficientNodes"},
		},
		{
			name: "FIFO within a priority, by Seq not by slice order",
			queue: []Job{
				{Key: "third", Compute: "a", Instances: 1, Seq: 3},
				{Key: "first", Compute: "a", Instances: 1, Seq: 1},
				{Key: "second", Compute: "a", Instances: 1, Seq: 2},
			},
			nodes:    idle("a", 2),
			assigned: []string{"first=a-01", "second=a-02"},
			waiting:  []string{"third:InsufficientNodes"},
		},
		{
			name: "reservation: small jobs may not take the blocked head's nodes",
			queue: []Job{
				{Key: "big", Compute: "a", Instances: 4, Seq: 1},
				{Key: "small", Compute: "a", Instances: 1, Seq: 2},
			},
			nodes:   idle("a", 3),
			waiting: []string{"big:InsufficientNodes", "small:Reserved@big"},
		},
		{
			// Booting nodes do not let jobs behind the head take free nodes:
			// nodes that finish booting go to the head first, so a stream of
			// small jobs cannot starve it.
			name: "reservation: booting nodes do not free the head's nodes for jobs behind it",
			queue: []Job{
				{Key: "big", Compute: "a", Instances: 4, Seq: 1},
				{Key: "s1", Compute: "a", Instances: 1, Seq: 2},
				{Key: "s2", Compute: "a", Instances: 1, Seq: 3},
				{Key: "s3", Compute: "a", Instances: 1, Seq: 4},
			},
			nodes:   cat(idle("a", 3), nodesIn("a", api.NodePreparing, 4, 3)),
			waiting: []string{"big:InsufficientNodes", "s1:Reserved@big", "s2:Reserved@big", "s3:Reserved@big"},
		},
		{
			name: "reservation: a second gang behind the head does not reserve",
			queue: []Job{
				{Key: "big", Compute: "a", Instances: 8, Seq: 1},
				{Key: "mid", Compute: "a", Instances: 4, Seq: 2},
				{Key: "s1", Compute: "a", Instances: 1, Seq: 3},
			},
			nodes:   cat(idle("a", 2), nodesIn("a", api.NodePreparing, 3, 7)),
			waiting: []string{"big:InsufficientNodes", "mid:InsufficientNodes", "s1:Reserved@big"},
		},
		{
			name: "reservation is per compute",
			queue: []Job{
				{Key: "big", Compute: "a", Instances: 4, Seq: 1},
				{Key: "other", Compute: "b", Instances: 1, Seq: 2},
			},
			nodes:    cat(idle("a", 1), idle("b", 1)),
			assigned: []string{"other=b-01"},
			waiting:  []string{"big:InsufficientNodes"},
		},
		{
			name: "a job bigger than the cap neither runs nor blocks",
			queue: []Job{
				{Key: "huge", Compute: "a", Instances: 16, Seq: 1},
				{Key: "s1", Compute: "a", Instances: 2, Seq: 2},
			},
			nodes:    idle("a", 2),
			max:      map[string]int{"a": 8},
			assigned: []string{"s1=a-01,a-02"},
			waiting:  []string{"huge:ExceedsCapacity"},
		},
		{
			name:    "a zero cap (no quota) makes every job exceed it",
			queue:   []Job{{Key: "j1", Compute: "a", Instances: 1, Seq: 1}},
			max:     map[string]int{"a": 0},
			waiting: []string{"j1:ExceedsCapacity"},
		},
		{
			name:     "a compute missing from maxNodes is unlimited",
			queue:    []Job{{Key: "g", Compute: "a", Instances: 16, Seq: 1}},
			nodes:    idle("a", 16),
			max:      map[string]int{"b": 1},
			assigned: []string{"g=a-01,a-02,a-03,a-04,a-05,a-06,a-07,a-08,a-09,a-10,a-11,a-12,a-13,a-14,a-15,a-16"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assigned, waiting := describe(Place(tt.queue, tt.nodes, tt.max))
			if !reflect.DeepEqual(assigned, tt.assigned) {
				t.Errorf("assigned = %q, want %q", assigned, tt.assigned)
			}
			if !reflect.DeepEqual(waiting, tt.waiting) {
				t.Errorf("waiting = %q, want %q", waiting, tt.waiting)
			}
		})
	}
}

func TestPlaceDoesNotModifyInput(t *testing.T) {
	queue := []Job{{Key: "b", Compute: "a", Instances: 1, Seq: 2}, {Key: "a", Compute: "a", Instances: 1, Seq: 1}}
	nodes := []Node{{ID: "n2", Compute: "a", State: api.NodeIdle}, {ID: "n1", Compute: "a", State: api.NodeIdle}}
	q0, n0 := slices.Clone(queue), slices.Clone(nodes)
	Place(queue, nodes, nil)
	if !reflect.DeepEqual(queue, q0) || !reflect.DeepEqual(nodes, n0) {
		t.Fatalf("Place modified its input: queue %v, nodes %v", queue, nodes)
	}
}

// randomInput builds a random cluster state and queue over a few computes.
func randomInput(r *rand.Rand) ([]Job, []Node, map[string]int) {
	computes := 1 + r.IntN(4)
	limits := map[string]int{}
	states := []string{api.NodeIdle, api.NodeIdle, api.NodeIdle, api.NodeRunning, api.NodePreparing,
		api.NodeLeaving, api.NodeUnusable, api.NodePreempted}
	var nodes []Node
	var queue []Job
	for c := range computes {
		name := fmt.Sprintf("c%d", c)
		if r.IntN(4) > 0 { // sometimes unknown: unlimited
			limits[name] = r.IntN(12)
		}
		for i := range r.IntN(15) {
			n := Node{ID: fmt.Sprintf("%s-n%d", name, i), Compute: name, State: states[r.IntN(len(states))]}
			if n.State == api.NodeRunning || (n.State == api.NodeIdle && r.IntN(10) == 0) {
				n.Job = "running-elsewhere"
			}
			nodes = append(nodes, n)
		}
	}
	for i := range r.IntN(30) {
		size := 1
		switch x := r.IntN(100); {
		case x < 10:
			size = 8
		case x < 30:
			size = 2 + r.IntN(3)
		case x < 33:
			size = 0
		}
		queue = append(queue, Job{Key: fmt.Sprintf("j%d", i), Compute: fmt.Sprintf("c%d", r.IntN(computes+1)),
			Instances: size, Priority: r.IntN(3), Seq: int64(r.IntN(20))})
	}
	return queue, nodes, limits
}

// TestPlaceProperties checks Place's invariants on thousands of random
// inputs: every job once, gangs of exactly their size on free nodes of their
// compute, no node twice, capacity and reservation rules, and independence
// from input order.
func TestPlaceProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 5000 {
		queue, nodes, limits := randomInput(r)
		res := Place(queue, nodes, limits)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: %s\nqueue %+v\nnodes %+v\nlimits %v\nresult %+v", iter, fmt.Sprintf(format, args...), queue, nodes, limits, res)
		}

		byKey := map[string]Job{}
		for _, j := range queue {
			byKey[j.Key] = j
		}
		byID := map[string]Node{}
		for _, n := range nodes {
			byID[n.ID] = n
		}

		seen := map[string]bool{}
		used := map[string]bool{}
		for _, a := range res.Assignments {
			j := byKey[a.Job]
			if seen[a.Job] {
				fail("job %s appears twice", a.Job)
			}
			seen[a.Job] = true
			if len(a.Nodes) != max(j.Instances, 1) {
				fail("job %s got %d nodes, wants %d", a.Job, len(a.Nodes), max(j.Instances, 1))
			}
			if l, ok := limits[j.Compute]; ok && len(a.Nodes) > l {
				fail("job %s placed beyond cap %d", a.Job, l)
			}
			for _, id := range a.Nodes {
				n := byID[id]
				if used[id] {
					fail("node %s assigned twice", id)
				}
				used[id] = true
				if n.Compute != j.Compute || n.State != api.NodeIdle || n.Job != "" {
					fail("job %s placed on unusable node %+v", a.Job, n)
				}
			}
		}
		heads := map[string]Waiting{}
		for _, w := range res.Waiting {
			j := byKey[w.Job]
			if seen[w.Job] {
				fail("job %s appears twice", w.Job)
			}
			seen[w.Job] = true
			l, limited := limits[j.Compute]
			if (w.Reason == ReasonExceedsCapacity) != (limited && max(j.Instances, 1) > l) {
				fail("job %s: reason %s, cap %d (known %v)", w.Job, w.Reason, l, limited)
			}
			if w.Reason == ReasonInsufficientNodes && w.Free >= w.Need {
				fail("job %s: InsufficientNodes with %d free >= %d needed", w.Job, w.Free, w.Need)
			}
			if w.Reason != ReasonExceedsCapacity {
				if _, ok := heads[j.Compute]; !ok {
					if w.Head != "" || w.Reason != ReasonInsufficientNodes {
						fail("first blocked job %s of %s is not the head: %+v", w.Job, j.Compute, w)
					}
					heads[j.Compute] = w
				}
			}
		}
		if len(seen) != len(queue) {
			fail("%d jobs in result, %d queued", len(seen), len(queue))
		}

		// Reservation: no job behind the head was placed.
		after := map[string]int{}
		order := slices.Clone(queue)
		slices.SortFunc(order, func(a, b Job) int {
			if a.Priority != b.Priority {
				return b.Priority - a.Priority
			}
			if a.Seq != b.Seq {
				return int(a.Seq - b.Seq)
			}
			return strings.Compare(a.Key, b.Key)
		})
		passedHead := map[string]bool{}
		for _, j := range order {
			if h, ok := heads[j.Compute]; ok && h.Job == j.Key {
				passedHead[j.Compute] = true
				continue
			}
			if passedHead[j.Compute] && seen[j.Key] && !slices.ContainsFunc(res.Waiting, func(w Waiting) bool { return w.Job == j.Key }) {
				after[j.Compute] += max(j.Instances, 1)
			}
		}
		for c, h := range heads {
			if after[c] > 0 {
				fail("compute %s: jobs behind head %s took %d nodes it holds", c, h.Job, after[c])
			}
		}

		// Order independence.
		q2, n2 := slices.Clone(queue), slices.Clone(nodes)
		r.Shuffle(len(q2), func(i, j int) { q2[i], q2[j] = q2[j], q2[i] })
		r.Shuffle(len(n2), func(i, j int) { n2[i], n2[j] = n2[j], n2[i] })
		a1, w1 := describe(res)
		a2, w2 := describe(Place(q2, n2, limits))
		if !reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(w1, w2) {
			fail("result depends on input order:\n%q %q\n%q %q", a1, w1, a2, w2)
		}
	}
}

// TestQueueOrder compares the fast queue order with a plain sort by
// (Priority desc, Seq, Key), on random queues whose sequence numbers are
// sometimes sorted, sometimes duplicated and sometimes span all of int64.
func TestQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := range 2000 {
		n := r.IntN(300)
		queue := make([]Job, n)
		for i := range queue {
			seq := int64(i)
			switch iter % 4 {
			case 1:
				seq = int64(r.IntN(n + 1))
			case 2:
				seq = int64(r.Uint64())
			case 3:
				seq = []int64{math.MinInt64, math.MaxInt64, 0, -1, 1}[r.IntN(5)]
			}
			queue[i] = Job{Key: fmt.Sprintf("k%03d", r.IntN(1000)), Priority: r.IntN(1 + iter%3), Seq: seq}
		}
		want := make([]int32, n)
		for i := range want {
			want[i] = int32(i)
		}
		slices.SortStableFunc(want, func(a, b int32) int {
			x, y := queue[a], queue[b]
			if x.Priority != y.Priority {
				return y.Priority - x.Priority
			}
			if x.Seq != y.Seq {
				if x.Seq < y.Seq {
					return -1
				}
				return 1
			}
			return strings.Compare(x.Key, y.Key)
		})
		var got []int32
		for _, e := range queueOrder(queue) {
			got = append(got, e.idx)
		}
		if n > 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: order %v, want %v", iter, got, want)
		}
	}
}
