package controller

import (
	"context"
	"slices"
	"strings"
	"unique"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/store"
)

// load reads the state one turn decides from. The unfinished jobs are kept
// between turns (the queued command jobs as the scheduler's entries in
// c.queue, the others decoded) and brought up to date from the store's change feed
// (store.Tx.ChangedJobs): a turn reads the jobs written since the last one,
// not the whole queue, which with thousands queued was the loop's main cost.
func (c *Controller) load(ctx context.Context) (*snapshot, error) {
	var s snapshot
	var changed []api.Job
	var cursor string
	full := c.cursor == ""
	err := c.store.View(ctx, func(tx store.Tx) (err error) {
		if s.computes, err = c.computes.read(ctx, tx); err != nil {
			return err
		}
		if s.nodes, err = c.nodes.read(ctx, tx); err != nil {
			return err
		}
		if full {
			if cursor, err = tx.JobCursor(ctx); err != nil {
				return err
			}
			changed, err = tx.ListJobs(ctx, store.JobFilter{Statuses: unfinished})
			return err
		}
		changed, cursor, err = tx.ChangedJobs(ctx, c.cursor)
		return err
	})
	if err != nil {
		return nil, err
	}
	if full {
		c.jobs, c.order, c.ordered = map[string]*api.Job{}, nil, map[string]bool{}
		c.queue = newJobQueue()
	}
	if full {
		c.gapJobs, c.gapAllJobs, c.stopAll = nil, true, true
	}
	for i := range changed {
		j := &changed[i]
		k := key(j.Workspace, j.Name)
		if !full {
			if c.gapJobs == nil {
				c.gapJobs = map[string]bool{}
			}
			c.gapJobs[k] = true
			c.stopLook[k] = true
		}
		switch {
		case !slices.Contains(unfinished, j.Status):
			delete(c.jobs, k)
			c.queue.remove(k)
			continue
		case j.Status == api.JobQueued && j.Type != api.JobTypePipeline && j.Type != api.JobTypeSweep:
			delete(c.jobs, k)
			c.queue.put(j)
			continue
		}
		c.queue.remove(k)
		if !c.ordered[k] {
			// A job that comes back unfinished before its key left
			// order keeps its place.
			c.order = append(c.order, k)
			c.ordered[k] = true
		}
		// A copy of its own: a pointer into changed would keep all of
		// changed (the whole queue, at a full load) alive.
		kept := *j
		c.jobs[k] = &kept
	}
	c.cursor = cursor
	s.queue = c.queue
	// order keeps the creation order the feed lists new jobs in; finished
	// jobs leave it once they are as many as the unfinished ones.
	var live []string
	if len(c.order) > 2*len(c.jobs)+64 {
		live = make([]string, 0, len(c.jobs))
	}
	s.jobs = make([]*api.Job, 0, len(c.jobs))
	for _, k := range c.order {
		j, ok := c.jobs[k]
		if !ok {
			continue
		}
		if live != nil {
			live = append(live, k)
		}
		if j.Type == api.JobTypePipeline || j.Type == api.JobTypeSweep {
			s.parents = append(s.parents, j)
			continue
		}
		s.jobs = append(s.jobs, j)
	}
	if live != nil {
		c.order, c.ordered = live, make(map[string]bool, len(live))
		for _, k := range live {
			c.ordered[k] = true
		}
	}
	return &s, nil
}

// jobQueue is the controller's queue: the queued command jobs, kept as the
// scheduler's compact entries (not whole api.Jobs) in a scheduler.Queue
// that load brings up to date from the job change feed, so that a turn
// places, counts demand and explains at the cost of what changed, not of
// the queue's length. A new leadership term builds it again from the
// store. Only Step (one goroutine) uses it.
type jobQueue struct {
	q *scheduler.Queue
	// reasons are the queued jobs' stored pending reasons, by job key.
	// Reasons and compute keys are interned (unique): most jobs share
	// them.
	reasons map[string]string
	// What reasons needs to look at only the jobs whose reason can have
	// changed: dirty are the jobs written since its last run, visited the
	// jobs the last placement visited (placed ones included), and
	// restReasons, per compute, the
	// reason by instance count it gave the jobs the last placement did not
	// visit (explain.go).
	dirty       map[string]bool
	visited     map[string]bool
	restReasons map[string]map[int]string
}

func newJobQueue() *jobQueue {
	return &jobQueue{q: scheduler.NewQueue(), reasons: map[string]string{},
		dirty: map[string]bool{}, visited: map[string]bool{}, restReasons: map[string]map[int]string{}}
}

// put queues j (a queued command job) or updates its entry.
func (q *jobQueue) put(j *api.Job) {
	k := key(j.Workspace, j.Name)
	ck := unique.Make(key(j.Workspace, j.Compute)).Value()
	q.q.Add(scheduler.Job{Key: k, Compute: ck, Instances: j.InstanceCount(), Priority: j.Priority(), Seq: j.CreatedOn.UnixNano()})
	q.reasons[k] = unique.Make(j.PendingReason).Value()
	q.dirty[k] = true
}

// remove takes the job with key k out of the queue, if it is there.
func (q *jobQueue) remove(k string) {
	if q.q.Remove(k) {
		delete(q.reasons, k)
		delete(q.dirty, k)
	}
}

// job returns the queued job with key k.
func (q *jobQueue) job(k string) (scheduler.Job, bool) {
	if q == nil {
		return scheduler.Job{}, false
	}
	return q.q.Job(k)
}

// waitingJobs names the first five jobs of a compute that wait, in queue
// order, and counts them all: what a scale-up's event says it is for.
type waitingJobs struct {
	first []string // job names
	total int
}

// firstWaiting returns the jobs of compute k that wait: those the
// placement visited (visited, in queue order), then the ones it did not.
func firstWaiting(q *jobQueue, visited []scheduler.Waiting, rests []scheduler.Rest, k string) waitingJobs {
	const n = 5
	var w waitingJobs
	for _, v := range visited {
		w.total++
		if len(w.first) < n {
			w.first = append(w.first, jobName(v.Job))
		}
	}
	for _, r := range rests {
		if r.Compute != k {
			continue
		}
		w.total += r.Jobs
		for j := range q.q.Unvisited(r) {
			if len(w.first) >= n {
				break
			}
			w.first = append(w.first, jobName(j.Key))
		}
	}
	return w
}

// jobName is the name in a job key (workspace/name).
func jobName(k string) string {
	_, name, _ := strings.Cut(k, "/")
	return name
}
