package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// provisioning moves computes through their provisioning states.
func (c *Controller) provisioning(ctx context.Context, s *snapshot, now time.Time) error {
	for _, comp := range s.computes {
		switch comp.ProvisioningState {
		case api.ProvisioningCreating, api.ProvisioningUpdating:
			state, msg := api.ProvisioningSucceeded, ""
			if _, ok := c.provider(ctx, comp.Location); !ok {
				state = api.ProvisioningFailed
				msg = fmt.Sprintf("location %q has no working provider; see the server log and its configuration", comp.Location)
			}
			if err := c.updateCompute(ctx, comp.Workspace, comp.Name, func(cp *api.Compute) bool {
				if cp.ProvisioningState != comp.ProvisioningState {
					return false
				}
				cp.ProvisioningState = state
				if msg != "" {
					cp.Errors = append(cp.Errors, api.ErrorDetail{Code: "ProvisioningFailed", Message: msg, Time: now})
				}
				return true
			}); err != nil {
				return err
			}
		case api.ProvisioningDeleting:
			if err := c.deleting(ctx, s, comp, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleting cancels a deleted compute's jobs, removes its nodes, and
// finally the compute.
func (c *Controller) deleting(ctx context.Context, s *snapshot, comp api.Compute, now time.Time) error {
	gone := "deleted"
	if comp.IsAttached() {
		gone = "detached"
	}
	// An attached cluster's jobs run on hidden computes of its location,
	// whose nodes its provider removes: they go first.
	ofCluster := map[string]bool{}
	for _, cp := range s.computes {
		if comp.IsKubernetes() && cp.Workspace == comp.Workspace && cp.ServerlessJob != "" && cp.Location == comp.Location {
			ofCluster[cp.Name] = true
		}
	}
	var end []string // job names
	for _, j := range s.jobs {
		if j.Workspace == comp.Workspace && (j.Compute == comp.Name || ofCluster[j.Compute]) {
			end = append(end, j.Name)
		}
	}
	for name := range ofCluster {
		for j := range s.queue.q.Jobs(key(comp.Workspace, name)) {
			end = append(end, jobName(j.Key))
		}
	}
	for j := range s.queue.q.Jobs(key(comp.Workspace, comp.Name)) {
		end = append(end, jobName(j.Key))
	}
	for _, name := range end {
		if _, err := service.ForceEnd(ctx, c.store, comp.Workspace, name, api.JobCanceled, "compute "+comp.Name+" was "+gone, now); err != nil {
			return err
		}
	}
	// A machine that stays unreachable (destroyed before its detach) must
	// not hold its compute forever: after attached.detach_timeout its node
	// is forgotten, and the events say what may be left there.
	_, _, attached := api.ParseAttachedLocation(comp.Location)
	giveUp := attached && now.Sub(comp.ModifiedOn) > c.cfg.Attached.DetachTimeout
	remaining := 0
	for _, n := range s.nodes {
		if n.Workspace != comp.Workspace || n.Compute != comp.Name {
			continue
		}
		remaining++
		if giveUp && !c.isInflight(n.ID) {
			var msg string
			if comp.VirtualMachine != nil {
				msg = fmt.Sprintf("machine %s did not answer for %s: node %s is forgotten; if the machine comes back, stop its agent and remove %s there by hand",
					comp.Address, c.cfg.Attached.DetachTimeout, n.ID, c.cfg.Attached.Dir)
			} else if comp.Kubernetes != nil {
				msg = fmt.Sprintf("the Kubernetes cluster did not answer for %s: node %s is forgotten; if the cluster comes back, delete its Pod and Secret (annotation tide/node-id=%s) in namespace %s by hand",
					c.cfg.Attached.DetachTimeout, n.ID, n.ID, comp.Kubernetes.Namespace)
			}
			c.forget(ctx, n.ID)
			_ = c.store.Update(ctx, func(tx store.Tx) error {
				return tx.AddEvent(ctx, comp.Workspace, "compute/"+comp.Name, &api.Event{Time: now, Kind: "DetachIncomplete", Message: msg})
			})
			continue
		}
		c.removeNode(ctx, n, "compute "+gone, nil)
	}
	if remaining > 0 || len(ofCluster) > 0 {
		return nil
	}
	// The provider calls below run in the background (effect): the
	// compute goes in the turn after they are done.
	k := key(comp.Workspace, comp.Name)
	if comp.IsInstance() {
		// A stopped instance's kept disk goes with it.
		if p, ok := c.provider(ctx, comp.Location); ok {
			done, err := c.effect(ctx, "disk:"+k, func(ctx context.Context) error {
				if err := p.Delete(ctx, comp.Instance.Node); err != nil && !provider.IsNotFound(err) {
					return err
				}
				return nil
			})
			if !done {
				return nil
			}
			if err != nil {
				return fmt.Errorf("deleting the disk of instance %s: %w", comp.Name, err)
			}
		}
	}
	if comp.IsAttached() {
		done, err := c.effect(ctx, "detach:"+k, func(ctx context.Context) error { return c.detached(ctx, comp) })
		if !done {
			return nil
		}
		if err != nil {
			// The machine keeps tide's binary; the compute goes anyway
			// (its node is gone), and its events say what was left.
			c.log.Warn("cleaning up an attached machine", "compute", comp.Name, "err", err)
			_ = c.store.Update(ctx, func(tx store.Tx) error {
				return tx.AddEvent(ctx, comp.Workspace, "compute/"+comp.Name, &api.Event{Time: now, Kind: "DetachIncomplete", Message: err.Error()})
			})
		}
	}
	return c.store.Update(ctx, func(tx store.Tx) error {
		if err := service.ForgetAttached(ctx, tx, &comp); err != nil {
			return err
		}
		err := tx.DeleteCompute(ctx, comp.Workspace, comp.Name)
		if store.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// liveness marks nodes whose agents stopped heartbeating unusable, fails
// their jobs, and gives up on nodes that never registered.
//
// The snapshot's nodes carry the heartbeat time of their last write, not
// of their last heartbeat (see nodeFeed): the store lists the nodes silent
// for UnusableAfter from an index on the heartbeat time, and c.silent
// judges them (heartbeats are written less often than they arrive:
// service.Silent).
func (c *Controller) liveness(ctx context.Context, s *snapshot, now time.Time) error {
	// A restarted server gives agents time to reconnect.
	if deadline := now.Add(-c.cfg.UnusableAfter); !c.started.After(deadline) {
		var silent []store.NodeSeen
		if err := c.store.View(ctx, func(tx store.Tx) (err error) {
			silent, err = tx.NodesSeenBefore(ctx, deadline)
			return err
		}); err != nil {
			return err
		}
		for _, x := range silent {
			n := c.nodes.node(x.ID)
			if n == nil || (n.State != api.NodeIdle && n.State != api.NodeRunning) {
				continue
			}
			last, gone := c.silent(x, now)
			if !gone {
				continue
			}
			reason := fmt.Sprintf("agent stopped heartbeating (last seen %s ago)", now.Sub(last).Round(time.Second))
			if err := c.markUnusable(ctx, *n, reason, now); err != nil {
				return err
			}
		}
	}
	for i := range s.nodes {
		n := &s.nodes[i]
		switch n.State {
		case api.NodePreparing:
			if now.Sub(n.CreatedOn) < c.cfg.ProvisionTimeout || c.isInflight(n.ID) {
				continue
			}
			reason := fmt.Sprintf("node did not register within %s", c.cfg.ProvisionTimeout)
			if err := c.markUnusable(ctx, *n, reason, now); err != nil {
				return err
			}
			c.recordFailure(ctx, n.Workspace, n.Compute, "ProvisioningTimeout", reason, now)
		}
	}
	return nil
}

// markUnusable makes a node unusable and fails the job ranks it ran. tide fails
// rather than requeues here: a job may have side effects that must not run
// twice, and Azure ML also fails a job whose node is lost; retries are an
// explicit job setting.
func (c *Controller) markUnusable(ctx context.Context, n api.Node, reason string, now time.Time) error {
	job := n.Job // the transaction's, since a submission may have placed one on it (PlaceSubmitted)
	err := c.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.GetNode(ctx, n.ID)
		if err != nil {
			return err
		}
		job = cur.Job
		cur.State, cur.StateSince, cur.Error = api.NodeUnusable, now, reason
		if err := tx.PutNode(ctx, cur); err != nil {
			return err
		}
		return tx.AddEvent(ctx, n.Workspace, "compute/"+n.Compute, &api.Event{Time: now, Kind: "NodeUnusable", Message: fmt.Sprintf("node %s unusable: %s", n.ID, reason)})
	})
	if err != nil && !store.IsNotFound(err) {
		return err
	}
	if job != "" {
		ws, name, attempt, perr := service.ParseAssignmentID(job)
		if perr == nil {
			if err := service.RankLost(ctx, c.store, ws, name, attempt, n.ID, fmt.Sprintf("node %s became unusable: %s", n.ID, reason), now); err != nil {
				return err
			}
		}
	}
	// Its agent, if it still runs, learns from the store at once (its
	// stream sends what is pending; its next heartbeat is reconciled),
	// not at the heartbeat that next falls due to be written.
	c.hub.Push(n.ID, Message{Kind: KindSync})
	c.log.Warn("node unusable", "node", n.ID, "reason", reason)
	return nil
}

// stopping pushes cancels to the nodes of jobs being canceled or failing,
// and ends jobs whose nodes are gone. A running job it found alive is
// looked at again only when it changed (written since: load notes it in
// stopLook) or one of its nodes did (nodeFeed.takeMoved): a turn looks at
// what changed, not at the ranks of every running job (walking 10,000
// running jobs cost a turn about 2 ms).
func (c *Controller) stopping(ctx context.Context, s *snapshot, now time.Time) error {
	moved, all := c.nodes.takeMoved()
	look := c.stopLook
	c.stopLook = map[string]bool{}
	jobs := s.jobs
	if !all && !c.stopAll {
		for k := range moved {
			look[key(k[0], k[1])] = true
		}
		jobs = make([]*api.Job, 0, len(look))
		for k := range look {
			if j := c.jobs[k]; j != nil && j.Type != api.JobTypePipeline && j.Type != api.JobTypeSweep {
				jobs = append(jobs, j)
			}
		}
		// In creation order, as a walk of s.jobs would take them.
		slices.SortFunc(jobs, func(a, b *api.Job) int {
			return cmp.Or(a.CreatedOn.Compare(b.CreatedOn), strings.Compare(a.Workspace, b.Workspace), strings.Compare(a.Name, b.Name))
		})
	}
	c.stopAll = false
	if err := c.stop(ctx, jobs, now); err != nil {
		c.stopAll = true // what the rest of the jobs' nodes did is lost: look at them all
		return err
	}
	return nil
}

// stop is stopping's look at jobs. A job it does not find alive and
// running (one being canceled or failing, or whose nodes are gone) is
// looked at again next turn.
func (c *Controller) stop(ctx context.Context, jobs []*api.Job, now time.Time) error {
	for _, j := range jobs {
		if j.Status != api.JobCancelRequested && j.Status != api.JobFinalizing && j.Status != api.JobPreparing && j.Status != api.JobRunning {
			continue
		}
		running := j.Status == api.JobPreparing || j.Status == api.JobRunning
		id := service.AssignmentID(j.Workspace, j.Name, j.Attempt)
		alive := 0
		for _, r := range j.Ranks {
			if api.JobTerminal(r.Status) {
				continue
			}
			n := c.nodes.node(r.Node)
			if n == nil || n.State == api.NodeUnusable || n.Job != id {
				continue
			}
			alive++
			if j.Status == api.JobCancelRequested || j.Status == api.JobFinalizing {
				c.pushCancel(r.Node, id, service.StopReason(j), now)
			}
		}
		if !running || alive == 0 {
			c.stopLook[key(j.Workspace, j.Name)] = true
		}
		if alive == 0 {
			var err error
			if j.Status == api.JobCancelRequested {
				_, err = service.ForceEndAttempt(ctx, c.store, j.Workspace, j.Name, j.Attempt, api.JobCanceled, "canceled by the user", now)
			} else {
				_, err = service.NodeLost(ctx, c.store, j.Workspace, j.Name, j.Attempt, "the job's nodes are gone", now)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Controller) pushCancel(node, id, reason string, now time.Time) {
	c.mu.Lock()
	last, sent := c.canceled[id+"@"+node]
	if sent && now.Sub(last) < 10*time.Second {
		c.mu.Unlock()
		return
	}
	c.canceled[id+"@"+node] = now
	c.mu.Unlock()
	c.hub.Push(node, Message{Kind: "cancel", Data: api.Cancel{ID: id, Reason: reason, GraceSeconds: int(c.cfg.CancelGrace.Seconds())}})
}
