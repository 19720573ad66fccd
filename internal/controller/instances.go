package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/instance"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// instances applies instance.Decide to every compute instance and the
// cluster schedules to every cluster. It returns when a schedule or an
// idle shutdown is due next.
func (c *Controller) instances(ctx context.Context, s *snapshot, now time.Time) (time.Time, error) {
	var wake time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for i := range s.computes {
		cp := &s.computes[i]
		if cp.ProvisioningState != api.ProvisioningSucceeded && cp.ProvisioningState != api.ProvisioningDeleting {
			continue
		}
		if !cp.IsInstance() {
			d := instance.DecideCluster(cp, now)
			soonest(d.Wake)
			if err := c.applyClusterSchedule(ctx, cp, d, s.computes, now); err != nil {
				return wake, err
			}
			continue
		}
		n := c.nodes.node(cp.Instance.Node)
		d := instance.Decide(instance.Input{Compute: cp, Node: n, Now: now})
		soonest(d.Wake)
		if err := c.applyInstance(ctx, cp, n, d, now); err != nil {
			return wake, err
		}
	}
	return wake, nil
}

// applyInstance records an instance's decided state and acts on its node.
func (c *Controller) applyInstance(ctx context.Context, cp *api.Compute, n *api.Node, d instance.Decision, now time.Time) error {
	if d.State == api.InstanceDeleting {
		return nil // deleting() removes the node and its disk
	}
	start := d.Action == instance.Start && !c.isInflight(cp.Instance.Node)
	err := c.updateIfChanged(ctx, cp, func(x *api.Compute) bool {
		in := x.Instance
		if in == nil || x.Etag != cp.Etag {
			return false // changed meanwhile: the next turn decides again
		}
		changed := false
		set := func(dst *string, v string) {
			if *dst != v {
				*dst, changed = v, true
			}
		}
		set(&in.State, d.State)
		set(&in.Desired, d.Desired)
		if d.Operation != nil && (in.LastOperation == nil || *in.LastOperation != *d.Operation) {
			in.LastOperation, changed = d.Operation, true
		}
		if !d.SchedulesCheckedOn.Equal(x.SchedulesCheckedOn) {
			x.SchedulesCheckedOn, changed = d.SchedulesCheckedOn, true
		}
		if in.Schedules != nil {
			for i := range in.Schedules.ComputeStartStop {
				if i < len(d.NextRuns) && !in.Schedules.ComputeStartStop[i].NextRun.Equal(d.NextRuns[i]) {
					in.Schedules.ComputeStartStop[i].NextRun, changed = d.NextRuns[i], true
				}
			}
		}
		if start {
			// A new start runs the startup script again, and a failed
			// creation script too.
			kept := slices.DeleteFunc(slices.Clone(in.Setup), func(r api.SetupRun) bool {
				return r.Script == "startup_script" || r.Status != "Succeeded"
			})
			if len(kept) != len(in.Setup) {
				in.Setup, changed = kept, true
			}
		}
		return changed
	})
	if err != nil {
		return err
	}
	if d.Event != "" {
		kind := "Schedule"
		if d.Operation != nil && d.Operation.OperationTrigger == api.TriggerIdleShutdown {
			kind = "IdleShutdown"
		}
		_ = c.store.Update(ctx, func(tx store.Tx) error {
			return tx.AddEvent(ctx, cp.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: kind, Message: d.Event})
		})
	}
	switch {
	case start:
		c.startInstance(ctx, cp, now)
	case d.Action == instance.Stop && n != nil:
		c.stopInstance(ctx, cp, *n, d.State, now)
	}
	return nil
}

// startInstance creates the instance's node, on its kept disk if any.
func (c *Controller) startInstance(ctx context.Context, cp *api.Compute, now time.Time) {
	p, ok := c.provider(ctx, cp.Location)
	if !ok {
		return // provisioning() already failed the compute
	}
	size, _ := c.catalog.Lookup(cp.Size)
	id := cp.Instance.Node
	n := api.Node{
		ID: id, Compute: cp.Name, Workspace: cp.Workspace, Location: cp.Location,
		Provider: p.Name(), State: api.NodePreparing, CreatedOn: now, StateSince: now,
		VCPUs: size.VCPUs, MemoryGB: size.MemoryGB, GPUs: size.GPUs,
	}
	if err := c.store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetNode(ctx, id); err == nil {
			return fmt.Errorf("node %s exists", id)
		}
		return tx.PutNode(ctx, &n)
	}); err != nil {
		c.log.Error("recording instance node", "node", id, "err", err)
		return
	}
	c.claim(id)
	req := provider.NodeRequest{ID: id, Workspace: cp.Workspace, Compute: cp.Name, Location: cp.Location,
		Size: size, Tier: api.TierDedicated, ServerURL: c.cfg.AgentServerURLs(), CAFingerprint: c.cfg.CAFingerprint, RunAs: c.cfg.RunAs(cp.Location), CacheGB: c.cfg.NodeCacheGB(cp.Location), Token: c.nodeToken(id), Runtime: c.Runtime(cp.Location), Keep: true}
	if ns := cp.NetworkSettings; ns != nil {
		req.Network = ns.VnetName
	}
	c.launch(ctx, p, req, "StartFailed", "starting instance node")
}

// stopInstance stops the instance's node and keeps its disk (a provider
// without Stopper deletes it: the event says so). A job running there
// ends as its node was lost.
func (c *Controller) stopInstance(ctx context.Context, cp *api.Compute, n api.Node, state string, now time.Time) {
	if !c.claim(n.ID) {
		return
	}
	if n.Job != "" {
		if ws, name, attempt, err := service.ParseAssignmentID(n.Job); err == nil {
			_, _ = service.NodeLost(ctx, c.store, ws, name, attempt, fmt.Sprintf("compute instance %s is %s", cp.Name, state), now)
		}
	}
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.GetNode(ctx, n.ID)
		if err != nil {
			return err
		}
		cur.State, cur.StateSince = api.NodeLeaving, now
		return tx.PutNode(ctx, cur)
	})
	p, _ := c.provider(ctx, n.Location)
	go func() {
		defer c.release(n.ID)
		pctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		var err error
		switch st, ok := p.(provider.Stopper); {
		case p == nil:
		case ok:
			err = st.Stop(pctx, n.ID)
		default:
			_ = c.store.Update(ctx, func(tx store.Tx) error {
				return tx.AddEvent(ctx, cp.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: "DiskLost",
					Message: fmt.Sprintf("location %s's provider (%s) cannot keep a stopped node's disk: the instance starts again on a fresh one", n.Location, p.Name())})
			})
			err = p.Delete(pctx, n.ID)
		}
		if err != nil && !provider.IsNotFound(err) {
			c.log.Warn("stopping instance", "node", n.ID, "err", err)
			return
		}
		c.forget(ctx, n.ID)
	}()
}

// applyClusterSchedule sets a cluster's node counts when its schedule
// fired, and records the next firings.
func (c *Controller) applyClusterSchedule(ctx context.Context, cp *api.Compute, d instance.ClusterDecision, all []api.Compute, now time.Time) error {
	if cp.Tide == nil || len(cp.Tide.Schedules) == 0 || cp.ProvisioningState != api.ProvisioningSucceeded {
		return nil
	}
	msg := ""
	if d.Set && d.Max > cp.MaxInstances {
		// A raised max_instances reserves more quota, as an update does.
		want := *cp
		want.MinInstances, want.MaxInstances = d.Min, d.Max
		if err := catalog.Check(all, want, c.catalog, c.cfg.Quotas); err != nil {
			d.Set = false
			msg = fmt.Sprintf("schedule (fired at %s) could not set max_instances %d: %v", d.At.Format(time.RFC3339), d.Max, err)
		}
	}
	err := c.updateIfChanged(ctx, cp, func(x *api.Compute) bool {
		if x.Etag != cp.Etag || x.Tide == nil {
			return false
		}
		changed := false
		if !d.SchedulesCheckedOn.Equal(x.SchedulesCheckedOn) {
			x.SchedulesCheckedOn, changed = d.SchedulesCheckedOn, true
		}
		for i := range x.Tide.Schedules {
			if i < len(d.NextRuns) && !x.Tide.Schedules[i].NextRun.Equal(d.NextRuns[i]) {
				x.Tide.Schedules[i].NextRun, changed = d.NextRuns[i], true
			}
		}
		if d.Set && (x.MinInstances != d.Min || x.MaxInstances != d.Max) {
			msg = fmt.Sprintf("schedule (fired at %s) set min_instances %d, max_instances %d (were %d, %d)",
				d.At.Format(time.RFC3339), d.Min, d.Max, x.MinInstances, x.MaxInstances)
			x.MinInstances, x.MaxInstances, x.ModifiedOn, changed = d.Min, d.Max, now, true
		}
		return changed
	})
	if err != nil || msg == "" {
		return err
	}
	return c.store.Update(ctx, func(tx store.Tx) error {
		return tx.AddEvent(ctx, cp.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: "Schedule", Message: msg})
	})
}

// updateIfChanged runs fn on a copy of the snapshot's compute first and
// writes only when fn changes something: most turns change nothing, and a
// write makes the turn read the state again.
func (c *Controller) updateIfChanged(ctx context.Context, cp *api.Compute, fn func(*api.Compute) bool) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	var probe api.Compute
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	probe.Etag = cp.Etag
	if !fn(&probe) {
		return nil
	}
	return c.updateCompute(ctx, cp.Workspace, cp.Name, fn)
}

// instanceWaitReason says why a job waits for a compute instance.
func instanceWaitReason(cp *api.Compute, nodeJob string, behind bool, head string) string {
	in := cp.Instance
	switch in.State {
	case api.InstanceRunning, api.InstanceJobRunning:
		if nodeJob != "" {
			_, job, _, _ := service.ParseAssignmentID(nodeJob)
			return fmt.Sprintf("compute instance %s runs one job at a time: queued behind job %s, which is running there", cp.Name, job)
		}
		if behind && head != "" {
			return fmt.Sprintf("compute instance %s runs one job at a time: queued behind %s", cp.Name, head[strings.Index(head, "/")+1:])
		}
		return fmt.Sprintf("compute instance %s runs one job at a time: queued behind the job ahead of it", cp.Name)
	case api.InstanceStopped, api.InstanceStopping:
		return fmt.Sprintf("compute instance %s is %s; start it with tide compute start %s", cp.Name, in.State, cp.Name)
	case api.InstanceSetupFailed:
		return fmt.Sprintf("compute instance %s is SetupFailed (see tide compute show %s); restart it with tide compute restart %s", cp.Name, cp.Name, cp.Name)
	}
	return fmt.Sprintf("waiting for compute instance %s, which is %s", cp.Name, in.State)
}

// pausedReason says why a job waits on a cluster with max_instances 0,
// and when a schedule raises it next.
func pausedReason(cp *api.Compute) string {
	r := "compute paused: max_instances is 0"
	if cp == nil || cp.Tide == nil {
		return r + "; raise it with tide compute update " + cpName(cp) + " --max-instances N"
	}
	var next time.Time
	for _, s := range cp.Tide.Schedules {
		if s.MaxInstances != nil && *s.MaxInstances > 0 && !s.NextRun.IsZero() && (next.IsZero() || s.NextRun.Before(next)) {
			next = s.NextRun
		}
	}
	if next.IsZero() {
		return r + "; raise it with tide compute update " + cp.Name + " --max-instances N"
	}
	return r + "; a schedule raises it at " + next.UTC().Format(time.RFC3339)
}

func cpName(cp *api.Compute) string {
	if cp == nil {
		return "NAME"
	}
	return cp.Name
}
