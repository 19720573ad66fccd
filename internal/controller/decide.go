package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
)

// decide places queued jobs, plans nodes and applies both.
func (c *Controller) decide(ctx context.Context, s *snapshot, serverlessWaits map[string]string, now time.Time, tr *turnTrace) (time.Time, error) {
	computes := map[string]*api.Compute{}
	caps := map[string]int{}
	for i := range s.computes {
		cp := &s.computes[i]
		if cp.ProvisioningState != api.ProvisioningSucceeded {
			continue
		}
		k := key(cp.Workspace, cp.Name)
		computes[k] = cp
		caps[k] = c.placeCap(cp)
	}
	// An instance takes jobs only while it is up (not setting up,
	// stopping or stopped); its node is its own, not the autoscaler's.
	usable := func(cp *api.Compute) bool {
		return !cp.IsInstance() || cp.Instance.State == api.InstanceRunning || cp.Instance.State == api.InstanceJobRunning
	}
	// The nodes are s.nodes, walked by compute (c.nodes keeps where each
	// compute's are). Place looks only at the free ones (idle, no job):
	// only those are listed, not the thousands that are busy.
	var snodes []scheduler.Node
	for k, cp := range computes {
		if !usable(cp) {
			continue
		}
		for _, i := range c.nodes.of(k).at {
			if n := &s.nodes[i]; free(n) {
				snodes = append(snodes, scheduler.Node{ID: n.ID, Compute: k, State: n.State, Job: n.Job})
			}
		}
	}
	// The queue holds the jobs of every compute; only those of computes
	// that are ready are placed and explained. The others have no free
	// node, so none of theirs is assigned.
	placed, rests := s.queue.q.Place(snodes, caps)
	placed.Waiting = slices.DeleteFunc(placed.Waiting, func(w scheduler.Waiting) bool { return computes[w.Compute] == nil })
	rests = slices.DeleteFunc(rests, func(r scheduler.Rest) bool { return computes[r.Compute] == nil })
	tr.phase("place")
	gaps := c.gaps.observe(s, computes, c.startTimes, c.gapChanges(s))
	c.saveGaps(ctx, now)
	// The nodes the placements take, as the turn read them; the plan
	// counts them busy.
	planned := map[string]string{}
	for _, a := range placed.Assignments {
		for _, n := range a.Nodes {
			planned[n] = a.Job
		}
	}
	plan := c.plan(s, computes, placed, gaps, planned, now)
	tr.phase("plan")
	if len(plan.Actions) == 0 {
		// Nothing to create or remove: the placements, the pending
		// reasons and the computes' status go in one transaction, and
		// the status counts the placed nodes busy without reading them
		// back. A placement the transaction finds moved (its node taken
		// meanwhile) leaves a count off by one until the next turn,
		// which the change that moved it wakes.
		c.warn(plan)
		why := c.reasons(placed, rests, plan, s, serverlessWaits, now)
		tr.phase("reasons")
		status := c.statusWrite(s, plan, planned)
		tr.phase("status")
		busy, err := c.placeAndWrite(ctx, placed.Assignments, computes, now, why, status)
		c.publishFree(snodes, busy)
		tr.phase("commit")
		return plan.NextWake, err
	}
	// Nodes to create or remove: the placements first, and the plan made
	// again from the nodes they did take.
	busy := c.assign(ctx, placed.Assignments, computes, now)
	c.publishFree(snodes, busy)
	tr.phase("assign")
	plan = c.plan(s, computes, placed, gaps, busy, now)
	c.warn(plan)
	waitingByCompute := map[string][]scheduler.Waiting{}
	for _, w := range placed.Waiting {
		waitingByCompute[w.Compute] = append(waitingByCompute[w.Compute], w)
	}
	for _, a := range plan.Actions {
		cp := computes[a.Compute]
		switch a.Kind {
		case autoscaler.ActionCreate:
			c.createNodes(ctx, cp, a.Count, a.Reason, firstWaiting(s.queue, waitingByCompute[a.Compute], rests, a.Compute), now)
		case autoscaler.ActionDelete:
			if n := c.nodes.node(a.Node); n != nil {
				c.scaleDown(ctx, *n, a.Reason, now)
			}
		}
	}
	tr.phase("nodes")
	// The pending reasons and the computes' status are written together.
	why := c.reasons(placed, rests, plan, s, serverlessWaits, now)
	tr.phase("reasons")
	status, err := c.status(ctx, s, plan)
	tr.phase("status")
	if err != nil {
		if why.failed != nil {
			why.failed()
		}
		return time.Time{}, err
	}
	err = c.commit(ctx, why, status)
	tr.phase("commit")
	if err != nil {
		return time.Time{}, err
	}
	return plan.NextWake, nil
}

// plan asks the autoscaler what to do with the computes' nodes, busy the
// nodes the turn's placements take (by node id) and gaps the adaptive
// computes' idle-gap histories.
func (c *Controller) plan(s *snapshot, computes map[string]*api.Compute, placed scheduler.Result, gaps map[string]*autoscaler.GapHistory,
	busy map[string]string, now time.Time) autoscaler.Result {
	snap := autoscaler.Snapshot{}
	for k, cp := range computes {
		if cp.IsInstance() {
			continue
		}
		snap.Computes = append(snap.Computes, autoscaler.Compute{
			Key: k, Min: cp.MinInstances, Max: cp.MaxInstances, QuotaMaxNodes: c.quotaCap(cp),
			IdleTimeout: time.Duration(cp.IdleTimeBeforeScaleDown) * time.Second,
			Policy:      cp.ScaleDownPolicy(), Gaps: gaps[k], MaxStarting: cp.MaxStartingNodes(),
		})
	}
	slices.SortFunc(snap.Computes, func(a, b autoscaler.Compute) int { return strings.Compare(a.Key, b.Key) })
	for i := range snap.Computes {
		sc := &snap.Computes[i]
		sc.Nodes, sc.Counted = autoscalerNodes(s.nodes, c.nodes.of(sc.Key).at, busy)
	}
	// Demand counted by size: what is queued less what was just placed
	// (whether or not its assignment was written, as Place's waiting jobs
	// would count it).
	placedSizes := map[string]map[int]int{}
	for _, a := range placed.Assignments {
		j, _ := s.queue.job(a.Job)
		if placedSizes[j.Compute] == nil {
			placedSizes[j.Compute] = map[int]int{}
		}
		placedSizes[j.Compute][max(j.Instances, 1)]++
	}
	for i := range snap.Computes {
		sc := &snap.Computes[i]
		fit, over := s.queue.q.Demand(sc.Key, sc.Cap())
		for _, f := range fit {
			if n := f.Jobs - placedSizes[sc.Key][f.Instances]; n > 0 {
				sc.Queued = append(sc.Queued, autoscaler.Demand{Instances: f.Instances, Jobs: n})
			}
		}
		for _, j := range over {
			sc.Queued = append(sc.Queued, autoscaler.Demand{Job: j.Key, Instances: j.Instances})
		}
	}
	return autoscaler.Plan(snap, now, c.policies)
}

// warn logs the autoscaler's warnings.
func (c *Controller) warn(plan autoscaler.Result) {
	for _, w := range plan.Warnings {
		c.log.Warn("autoscaler", "compute", w.Compute, "warning", w.Message)
	}
}

// free reports whether scheduler.Place may give node n a job (its pools
// are the idle nodes without one).
func free(n *api.Node) bool { return n.State == api.NodeIdle && n.Job == "" }

// autoscalerNodes is what autoscaler.Plan needs of a compute's nodes
// (list[i] for i in at; busy the nodes this turn just assigned, by id): the
// nodes it may act on one by one (idle ones, which may leave; unusable and
// preempted ones, which it removes; any of a state it does not know)
// listed, and the busy and preparing ones only counted. Listing every node
// cost a turn 10,000 of them at 10,000 nodes. Leaving nodes, and preempted
// ones still stopping their job, are neither: Plan ignores them.
func autoscalerNodes(list []api.Node, at []int, busy map[string]string) ([]autoscaler.Node, autoscaler.NodeCounts) {
	var nodes []autoscaler.Node
	var counted autoscaler.NodeCounts
	for _, i := range at {
		n := &list[i]
		state, job := n.State, n.Job
		if j, ok := busy[n.ID]; ok {
			state, job = api.NodeRunning, j
		}
		switch {
		case state == api.NodeLeaving || state == api.NodePreempted && job != "":
		case state == api.NodeUnusable || state == api.NodePreempted:
			nodes = append(nodes, autoscaler.Node{ID: n.ID, State: state, Job: job, IdleSince: n.StateSince})
		case job != "" || state == api.NodeRunning:
			counted.Busy++
		case state == api.NodePreparing:
			counted.Preparing++
		default:
			nodes = append(nodes, autoscaler.Node{ID: n.ID, State: state, Job: job, IdleSince: n.StateSince})
		}
	}
	return nodes, counted
}

// placeCap is the most nodes compute cp can ever have, as
// scheduler.Place takes it: the lower of max_instances and the quota cap.
func (c *Controller) placeCap(cp *api.Compute) int {
	return min(cp.MaxInstances, c.quotaCap(cp))
}

// quotaCap is the most nodes a compute's quota reservation allows: the
// reservation is max_instances × vCPUs, so it is max_instances unless the
// size is unknown.
func (c *Controller) quotaCap(cp *api.Compute) int {
	if _, _, ok := api.ParseAttachedLocation(cp.Location); ok {
		return cp.MaxInstances // the machine or cluster is the user's: no quota
	}
	if _, ok := c.catalog.Lookup(cp.Size); !ok {
		return 0
	}
	return cp.MaxInstances
}
