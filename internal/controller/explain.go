package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/store"
)

// explain stores why each queued job waits, when that changed: what it
// waits for, with the numbers a user needs to judge how long.
func (c *Controller) explain(ctx context.Context, waiting []scheduler.Waiting, plan autoscaler.Result, s *snapshot, serverlessWaits map[string]string, now time.Time) error {
	unsched := map[string]string{}
	for _, u := range plan.Unschedulable {
		unsched[u.Job] = u.Reason
	}
	// Reasons name what changes slowly (node counts, not which node is
	// free this instant), so that a step rewrites only the reasons that
	// really changed.
	starting := map[string]int{}
	startingSince := map[string]time.Time{}
	startingLast := map[string]time.Time{} // the newest starting node
	existing := map[string]int{}           // nodes that count against max_instances
	// What the provider says a starting node waits for (a Pod that cannot
	// be scheduled, a Slurm job's pending reason): the first such node's,
	// by ID, so the reason does not flip between nodes.
	startingWhy := map[string]*api.Node{}
	for _, n := range s.nodes {
		k := key(n.Workspace, n.Compute)
		switch n.State {
		case api.NodePreparing:
			if w := startingWhy[k]; n.Error != "" && (w == nil || n.ID < w.ID) {
				startingWhy[k] = &n
			}
			starting[k]++
			if since := startingSince[k]; since.IsZero() || n.CreatedOn.Before(since) {
				startingSince[k] = n.CreatedOn
			}
			if n.CreatedOn.After(startingLast[k]) {
				startingLast[k] = n.CreatedOn
			}
			existing[k]++
		case api.NodeIdle, api.NodeRunning:
			existing[k]++
		}
	}
	maxNodes := map[string]int{}
	byKey := map[string]*api.Compute{}
	for i, cp := range s.computes {
		maxNodes[key(cp.Workspace, cp.Name)] = cp.MaxInstances
		byKey[key(cp.Workspace, cp.Name)] = &s.computes[i]
	}
	nodeJobs := map[string]string{}
	for _, n := range s.nodes {
		nodeJobs[n.ID] = n.Job
	}
	c.mu.Lock()
	failing := map[string]autoscaler.Backoff{}
	for k, b := range c.backoff {
		failing[k] = b
	}
	c.mu.Unlock()
	stored := map[string]string{} // the reasons the snapshot holds
	for _, j := range s.jobs {
		if j.Status == api.JobQueued {
			stored[key(j.Workspace, j.Name)] = j.PendingReason
		}
	}
	changed := map[string]string{}
	for _, w := range waiting {
		k := w.Compute
		var reason string
		switch b := failing[k]; {
		case byKey[k] != nil && byKey[k].IsInstance():
			reason = instanceWaitReason(byKey[k], nodeJobs[byKey[k].Instance.Node], w.Reason == scheduler.ReasonReserved, w.Head)
		case serverlessWaits[k] != "":
			reason = serverlessWaits[k]
		case maxNodes[k] == 0:
			reason = pausedReason(byKey[k])
		case unsched[w.Job] != "":
			reason = unsched[w.Job]
		case b.Failures > 0 && b.Blocks(now):
			reason = fmt.Sprintf("waiting for %d node(s): provisioning is failing (%d failure(s), last: %s); retrying at %s",
				w.Need, b.Failures, b.Last, b.Until.UTC().Format(time.TimeOnly))
		case w.Reason == scheduler.ReasonReserved:
			reason = fmt.Sprintf("waiting behind %s (higher in the queue), which holds the free nodes of its compute", strings.SplitN(w.Head, "/", 2)[1])
		case starting[k] > 0:
			reason = fmt.Sprintf("waiting for %d node(s): %d starting since %s",
				w.Need, starting[k], startingSince[k].UTC().Format(time.TimeOnly))
			if typical := c.startTimes[k]; typical > 0 {
				// An estimate, where tide has one: the nodes of this
				// compute that registered took typical to start.
				reason += fmt.Sprintf("; expected by about %s (its nodes take %s to start)",
					startingLast[k].Add(typical).UTC().Format(time.TimeOnly), typical.Round(time.Second))
			}
			if n := startingWhy[k]; n != nil {
				reason += fmt.Sprintf("; node %s: %s", n.ID, n.Error)
			}
		case existing[k] >= maxNodes[k]:
			// Place gave the free nodes to the jobs ahead: all are busy.
			reason = fmt.Sprintf("compute at max_instances (%d node(s), all busy)", maxNodes[k])
		default:
			reason = fmt.Sprintf("waiting for %d node(s)", w.Need)
		}
		if stored[w.Job] != reason {
			changed[w.Job] = reason
		}
	}
	if len(changed) == 0 {
		return nil
	}
	// One transaction for every change: a step costs what changed, not the
	// length of the queue.
	err := c.store.Update(ctx, func(tx store.Tx) error {
		for jk, reason := range changed {
			ws, name, _ := strings.Cut(jk, "/")
			j, err := tx.GetJob(ctx, ws, name)
			if store.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			if j.Status != api.JobQueued || j.PendingReason == reason {
				continue
			}
			j.PendingReason = reason
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// learnStartTimes records, per compute, the median time its current nodes
// took from creation to their agent's first registration. A compute keeps
// the last figure when its nodes are gone (scaled to zero), so the next
// scale-up from zero has an estimate too.
func (c *Controller) learnStartTimes(nodes []api.Node) {
	took := map[string][]time.Duration{}
	for _, n := range nodes {
		if !n.RegisteredOn.IsZero() && !n.CreatedOn.IsZero() && n.RegisteredOn.After(n.CreatedOn) {
			k := key(n.Workspace, n.Compute)
			took[k] = append(took[k], n.RegisteredOn.Sub(n.CreatedOn))
		}
	}
	for k, ds := range took {
		slices.Sort(ds)
		c.startTimes[k] = ds[len(ds)/2]
	}
}
