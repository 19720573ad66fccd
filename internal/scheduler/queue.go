package scheduler

import (
	"cmp"
	"iter"
	"maps"
	"slices"

	"github.com/google/btree"
)

// Queue keeps queued jobs in placement order, per compute, for callers that
// decide again and again on a queue that changes by a few jobs at a time.
// Place sorts and walks the whole queue on every call; Queue.Place walks
// each compute's queue from its head only as far as a job can still be
// placed, so a decision after a hundred arrivals and completions costs time
// in proportion to the jobs placed, not to the hundred thousand that wait.
//
// A Queue is a memo of Place's input, not a second set of rules: for the
// same jobs and nodes, Queue.Place assigns exactly what Place assigns, and
// every job Place reports waiting is either in Result.Waiting or stood for
// by a Rest with the same reason. The zero value is not usable; call
// NewQueue. A Queue is not safe for concurrent use.
type Queue struct {
	byKey    map[string]Job
	computes map[string]*computeQueue
}

// computeQueue is one compute's queued jobs.
type computeQueue struct {
	order *btree.BTreeG[Job]
	// sizes counts the queued jobs by instance count, for Demand.
	sizes map[int]int
}

// SizeCount is how many queued jobs need Instances nodes each.
type SizeCount struct {
	Instances int
	Jobs      int
}

// Rest stands for the jobs of one compute that Queue.Place did not visit.
// The walk stops once a head holds the compute's reservation: no later job
// can be placed, and each waits as Wait says.
type Rest struct {
	// Compute is the compute's key.
	Compute string
	// Jobs is how many of the compute's queued jobs were not visited.
	Jobs int
	// Head is the job that holds the reservation.
	Head string
	// Free is the number of the compute's free nodes left unassigned.
	Free int
	// Limit is the compute's maxNodes, -1 when unknown.
	Limit int
}

// Wait returns how job j, one of the jobs r stands for, waits: as Place
// would report it.
func (r Rest) Wait(j Job) Waiting {
	need := max(j.Instances, 1)
	w := Waiting{Job: j.Key, Compute: j.Compute, Need: need, Free: r.Free}
	switch {
	case r.Limit >= 0 && need > r.Limit:
		w.Reason = ReasonExceedsCapacity
	case need <= r.Free:
		// Nodes are free but the head's reservation holds them.
		w.Reason, w.Head = ReasonReserved, r.Head
	default:
		w.Reason = ReasonInsufficientNodes
	}
	return w
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	return &Queue{byKey: make(map[string]Job), computes: make(map[string]*computeQueue)}
}

// before orders jobs for placement: Priority descending, then Seq, then Key.
// It compares the keys only on a tie: the B-tree calls it a dozen times per
// insert or delete.
func before(a, b Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	return a.Key < b.Key
}

// Add queues j, replacing the job with the same key if there is one.
func (q *Queue) Add(j Job) {
	q.Remove(j.Key)
	cq := q.computes[j.Compute]
	if cq == nil {
		cq = &computeQueue{order: btree.NewG(32, before), sizes: make(map[int]int)}
		q.computes[j.Compute] = cq
	}
	q.byKey[j.Key] = j
	cq.order.ReplaceOrInsert(j)
	cq.sizes[max(j.Instances, 1)]++
}

// Remove takes the job with key out of the queue and reports whether it
// was there.
func (q *Queue) Remove(key string) bool {
	j, ok := q.byKey[key]
	if !ok {
		return false
	}
	delete(q.byKey, key)
	cq := q.computes[j.Compute]
	cq.order.Delete(j)
	size := max(j.Instances, 1)
	if cq.sizes[size]--; cq.sizes[size] == 0 {
		delete(cq.sizes, size)
	}
	if cq.order.Len() == 0 {
		delete(q.computes, j.Compute)
	}
	return true
}

// Job returns the queued job with key.
func (q *Queue) Job(key string) (Job, bool) {
	j, ok := q.byKey[key]
	return j, ok
}

// Len returns the number of queued jobs.
func (q *Queue) Len() int { return len(q.byKey) }

// Demand returns a compute's queued jobs that fit maxNodes counted by
// size, smallest first, and lists the jobs that need more (they can never
// run; see ReasonExceedsCapacity). A negative maxNodes means unlimited.
func (q *Queue) Demand(compute string, maxNodes int) (fit []SizeCount, over []Job) {
	cq := q.computes[compute]
	if cq == nil {
		return nil, nil
	}
	tooBig := false
	for size, n := range cq.sizes {
		if maxNodes >= 0 && size > maxNodes {
			tooBig = true
			continue
		}
		fit = append(fit, SizeCount{Instances: size, Jobs: n})
	}
	slices.SortFunc(fit, func(a, b SizeCount) int { return cmp.Compare(a.Instances, b.Instances) })
	if tooBig {
		// Rare: instance_count above max_instances is refused at submit,
		// so only a lowered max or quota gets here.
		cq.order.Ascend(func(j Job) bool {
			if max(j.Instances, 1) > maxNodes {
				over = append(over, j)
			}
			return true
		})
	}
	return fit, over
}

// Place decides, like the package's Place function, which of the queued
// jobs run on which free nodes; it reads but never changes q, so the
// caller removes the assigned jobs once it has started them. nodes and
// maxNodes are as for Place. Nodes of computes with no queued job are
// ignored.
//
// Result.Assignments are the same as Place's, grouped by compute in key
// order. Result.Waiting lists only the jobs the walk visited; per compute
// where it stopped early, a Rest in rests stands for the others.
func (q *Queue) Place(nodes []Node, maxNodes map[string]int) (res Result, rests []Rest) {
	get := pools(nodes, maxNodes)
	// Most walks visit the jobs placed and one head per compute.
	res.Assignments = make([]Assignment, 0, len(nodes))
	res.Waiting = make([]Waiting, 0, len(nodes)+2*len(q.computes))
	for _, k := range slices.Sorted(maps.Keys(q.computes)) {
		cq, p := q.computes[k], get(k)
		visited := 0
		cq.order.Ascend(func(j Job) bool {
			if p.settled() {
				return false
			}
			p.visit(&j, &res)
			visited++
			return true
		})
		if left := cq.order.Len() - visited; left > 0 {
			rests = append(rests, Rest{Compute: k, Jobs: left, Head: p.head, Free: len(p.free) - p.used, Limit: p.limit})
		}
	}
	return res, rests
}

// All yields the queued jobs, per compute in key order, each compute's in
// placement order.
func (q *Queue) All() iter.Seq[Job] {
	return func(yield func(Job) bool) {
		keys := slices.Sorted(maps.Keys(q.computes))
		for _, k := range keys {
			ok := true
			q.computes[k].order.Ascend(func(j Job) bool {
				ok = yield(j)
				return ok
			})
			if !ok {
				return
			}
		}
	}
}

// Unvisited yields the jobs r stands for, in placement order: the last
// r.Jobs queued jobs of r.Compute, as the Place that returned r left them.
func (q *Queue) Unvisited(r Rest) iter.Seq[Job] {
	return func(yield func(Job) bool) {
		cq := q.computes[r.Compute]
		if cq == nil {
			return
		}
		skip := cq.order.Len() - r.Jobs
		cq.order.Ascend(func(j Job) bool {
			if skip > 0 {
				skip--
				return true
			}
			return yield(j)
		})
	}
}

// Jobs yields the queued jobs of one compute in placement order.
func (q *Queue) Jobs(compute string) iter.Seq[Job] {
	return func(yield func(Job) bool) {
		if cq := q.computes[compute]; cq != nil {
			cq.order.Ascend(yield)
		}
	}
}

// Count returns the number of queued jobs of one compute.
func (q *Queue) Count(compute string) int {
	if cq := q.computes[compute]; cq != nil {
		return cq.order.Len()
	}
	return 0
}
