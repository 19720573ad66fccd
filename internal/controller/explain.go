package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/store"
)

// reasons works out why each queued job waits, when that changed: what it
// waits for, with the numbers a user needs to judge how long. placed is
// what the placement decided for the jobs it visited and rests stand for
// the others (see scheduler.Queue.Place). A job's reason is a function of its compute and
// the nodes it needs, so it looks only at the jobs whose reason can
// have changed: the visited ones, the rest of a compute whose reason for
// some size changed since the last turn, and of the other computes the jobs
// written or visited since then. It compares with the stored reasons
// (s.queue) and returns the write of what differs, for the turn to commit.
func (c *Controller) reasons(placed scheduler.Result, rests []scheduler.Rest, plan autoscaler.Result, s *snapshot, serverlessWaits map[string]string, now time.Time) write {
	q := s.queue
	// An unschedulable job's reason names its compute and size, not the
	// job.
	type size struct {
		compute string
		need    int
	}
	unsched := map[size]string{}
	for _, u := range plan.Unschedulable {
		unsched[size{u.Compute, u.Instances}] = u.Reason
	}
	maxNodes := map[string]int{}
	byKey := map[string]*api.Compute{}
	for i, cp := range s.computes {
		maxNodes[key(cp.Workspace, cp.Name)] = cp.MaxInstances
		byKey[key(cp.Workspace, cp.Name)] = &s.computes[i]
	}
	// Reasons name what changes slowly (node counts, not which node is
	// free this instant), so that a step rewrites only the reasons that
	// really changed: the nodes' figures kept per compute (computeNodes),
	// the starting nodes' error the first such node's, by id, so that the
	// reason does not flip between nodes.
	instanceJob := func(cp *api.Compute) string { // what the instance's node runs
		if n := c.nodes.node(cp.Instance.Node); n != nil && n.Workspace == cp.Workspace && n.Compute == cp.Name {
			return n.Job
		}
		return ""
	}
	c.mu.Lock()
	failing := map[string]autoscaler.Backoff{}
	for k, b := range c.backoff {
		failing[k] = b
	}
	c.mu.Unlock()
	reasonOf := func(w scheduler.Waiting) string {
		k := w.Compute
		switch b := failing[k]; {
		case byKey[k] != nil && byKey[k].IsInstance():
			return instanceWaitReason(byKey[k], instanceJob(byKey[k]), w.Reason == scheduler.ReasonReserved, w.Head)
		case serverlessWaits[k] != "":
			return serverlessWaits[k]
		case maxNodes[k] == 0:
			return pausedReason(byKey[k])
		case unsched[size{k, w.Need}] != "":
			return unsched[size{k, w.Need}]
		case b.Failures > 0 && b.Blocks(now):
			return fmt.Sprintf("waiting for %d node(s): provisioning is failing (%d failure(s), last: %s); retrying at %s",
				w.Need, b.Failures, b.Last, b.Until.UTC().Format(time.TimeOnly))
		case w.Reason == scheduler.ReasonReserved:
			return fmt.Sprintf("waiting behind %s (higher in the queue), which holds the free nodes of its compute", jobName(w.Head))
		case c.nodes.of(k).starting > 0:
			cn := c.nodes.of(k)
			reason := fmt.Sprintf("waiting for %d node(s): %d starting since %s",
				w.Need, cn.starting, cn.startingSince.UTC().Format(time.TimeOnly))
			if typical := c.startTimes[k]; typical > 0 {
				// An estimate, where tide has one: the nodes of this
				// compute that registered took typical to start.
				reason += fmt.Sprintf("; expected by about %s (its nodes take %s to start)",
					cn.startingLast.Add(typical).UTC().Format(time.TimeOnly), typical.Round(time.Second))
			}
			if cn.startingWhy != "" {
				reason += fmt.Sprintf("; node %s: %s", cn.startingWhy, cn.startingError)
			}
			return reason
		case c.nodes.of(k).existing >= maxNodes[k]:
			// Place gave the free nodes to the jobs ahead: all are busy.
			return fmt.Sprintf("compute at max_instances (%d node(s), all busy)", maxNodes[k])
		default:
			return fmt.Sprintf("waiting for %d node(s)", w.Need)
		}
	}
	changed := map[string]string{}
	note := func(job, reason string) {
		if stored, ok := q.reasons[job]; !ok || stored != reason {
			changed[job] = reason
		}
	}
	visited := make(map[string]bool, len(placed.Waiting)+len(placed.Assignments))
	for _, w := range placed.Waiting {
		visited[w.Job] = true
		note(w.Job, reasonOf(w))
	}
	// The jobs a placement did not visit wait as their compute's Rest
	// says, by their size.
	restReasons := make(map[string]map[int]string, len(rests))
	same := map[string]bool{} // computes whose rest's reasons did not change
	for _, r := range rests {
		bySize := map[int]string{}
		fit, _ := q.q.Demand(r.Compute, -1)
		for _, f := range fit {
			bySize[f.Instances] = reasonOf(r.Wait(scheduler.Job{Compute: r.Compute, Instances: f.Instances}))
		}
		restReasons[r.Compute] = bySize
		if maps.Equal(bySize, q.restReasons[r.Compute]) {
			same[r.Compute] = true
			continue
		}
		for j := range q.q.Unvisited(r) {
			note(j.Key, bySize[max(j.Instances, 1)])
		}
	}
	// Of a compute whose rest's reasons are the same as last turn, only a
	// job written or visited since can differ from them.
	for _, set := range []map[string]bool{q.dirty, q.visited} {
		for jk := range set {
			j, ok := q.q.Job(jk)
			if !ok || visited[jk] || !same[j.Compute] {
				continue
			}
			note(jk, restReasons[j.Compute][max(j.Instances, 1)])
		}
	}
	// A placed job whose assignment was not written (its node was taken
	// meanwhile) stays queued with the reason it had: it is looked at next
	// turn, as a visited one.
	for _, a := range placed.Assignments {
		visited[a.Job] = true
	}
	q.dirty, q.visited, q.restReasons = map[string]bool{}, visited, restReasons
	if len(changed) == 0 {
		return write{}
	}
	// One transaction for every change: a step costs what changed, not the
	// length of the queue. Each reason is set in the stored job
	// (SetPendingReasons, one statement for them all), not read and written whole: a job that left the
	// queue meanwhile keeps what it has.
	reasons := make(map[store.JobKey]string, len(changed))
	for jk, reason := range changed {
		ws, name, _ := strings.Cut(jk, "/")
		reasons[store.JobKey{Workspace: ws, Name: name}] = reason
	}
	do := func(ctx context.Context, tx store.Tx) error {
		_, err := tx.SetPendingReasons(ctx, reasons)
		return err
	}
	// When the write fails, what the rests' jobs store is no longer known:
	// look at them all next turn.
	return write{do: do, failed: func() { q.restReasons = map[string]map[int]string{} }}
}

// write is part of a turn's last transaction (commit): do writes in tx,
// failed is called when the transaction failed.
type write struct {
	do     func(ctx context.Context, tx store.Tx) error
	failed func()
}

// commit runs the writes in one transaction: a turn waits for the store's
// writer once for them all.
func (c *Controller) commit(ctx context.Context, ws ...write) error {
	_, err := c.placeAndWrite(ctx, nil, nil, time.Time{}, ws...)
	return err
}

// learnStartTimes records, per compute, the median time its current nodes
// took from creation to their agent's first registration (kept with the
// compute's nodes: computeNodes). A compute keeps the last figure when its
// nodes are gone (scaled to zero), so the next scale-up from zero has an
// estimate too.
func (c *Controller) learnStartTimes() {
	for k, cn := range c.nodes.computes {
		if cn.startTime > 0 {
			c.startTimes[k] = cn.startTime
		}
	}
}
