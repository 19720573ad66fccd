package controller

import (
	"context"
	"slices"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/store"
)

// submittedChecks bounds the nodes PlaceSubmitted reads beyond the ones
// the job needs: the free nodes it knows of are the last turn's, and some
// may have been taken since.
const submittedChecks = 8

// PlaceSubmitted places job j, which its submission has just written
// Queued in tx, in that same transaction when the scheduler places it at
// once: the job is the only one queued in its workspace (so no other job
// is ahead of it, and no head reserves its compute's nodes) and enough of
// its compute's nodes are free. It returns what to do once tx has
// committed (push the assignment to the nodes' agents), or nil when it
// left the job to the next turn. A job so placed starts without waiting
// for a turn of the loop to wake, read the store and commit a transaction
// of its own (or for the turn under way to end).
//
// The decision is scheduler.Place's, over the job and the free nodes of
// its compute; the nodes are the ones the last turn left free (publishFree),
// each read again in tx, so a node taken since is not used, and is not
// read again by later submissions until the next turn (dropFree). It places
// nothing until this replica leads and its first turn ran (the first turn
// waits for the providers' reconciliation; see Run), nor serverless jobs
// and jobs of instances, which a turn handles. j is updated to what was
// written.
func (c *Controller) PlaceSubmitted(ctx context.Context, tx store.Tx, j *api.Job) (func(), error) {
	if !c.placing.Load() || j.Serverless != nil || j.Type != api.JobTypeCommand || j.Status != api.JobQueued {
		return nil, nil
	}
	k := key(j.Workspace, j.Compute)
	ids := (*c.freeNodes.Load())[k]
	need := j.InstanceCount()
	if len(ids) < need {
		return nil, nil
	}
	if n, err := tx.QueuedJobs(ctx, j.Workspace); err != nil || n != 1 {
		return nil, err
	}
	cp, err := tx.GetCompute(ctx, j.Workspace, j.Compute)
	if err != nil {
		return nil, err
	}
	if cp.ProvisioningState != api.ProvisioningSucceeded || cp.IsInstance() {
		return nil, nil
	}
	var nodes []scheduler.Node
	var taken []string // since the last turn: no later submission reads them again
	for i, id := range ids {
		if len(nodes) == need || i == need+submittedChecks {
			break
		}
		n, err := tx.GetNode(ctx, id)
		if store.IsNotFound(err) {
			taken = append(taken, id)
			continue
		}
		if err != nil {
			return nil, err
		}
		if n.Workspace == j.Workspace && n.Compute == j.Compute && free(n) {
			nodes = append(nodes, scheduler.Node{ID: n.ID, Compute: k, State: n.State, Job: n.Job})
		} else {
			taken = append(taken, id)
		}
	}
	defer func() { c.dropFree(k, taken) }()
	placed := scheduler.Place([]scheduler.Job{{Key: key(j.Workspace, j.Name), Compute: k, Instances: need, Priority: j.Priority(), Seq: j.CreatedOn.UnixNano()}},
		nodes, map[string]int{k: c.placeCap(cp)})
	if len(placed.Assignments) == 0 {
		return nil, nil
	}
	taken = append(taken, placed.Assignments[0].Nodes...)
	pushes, err := c.place(ctx, tx, placed.Assignments, map[string]*api.Compute{k: cp}, map[string]string{}, c.now().UTC())
	if err != nil {
		return nil, err
	}
	cur, err := tx.GetJob(ctx, j.Workspace, j.Name)
	if err != nil {
		return nil, err
	}
	if cur.Status == api.JobQueued {
		return nil, nil // the placement was refused (errMoved): left to the next turn
	}
	*j = *cur
	return func() {
		for _, p := range pushes {
			c.hub.Push(p.node, Message{Kind: "assign", Data: p.a})
		}
	}, nil
}

// dropFree takes ids out of compute k's free nodes until the next turn
// publishes them again. A node taken by a placement whose transaction then
// fails is missing until that turn: only the fast path misses it.
func (c *Controller) dropFree(k string, ids []string) {
	if len(ids) == 0 {
		return
	}
	for {
		old := c.freeNodes.Load()
		free := make(map[string][]string, len(*old))
		for ck, v := range *old {
			free[ck] = v
		}
		free[k] = slices.DeleteFunc(slices.Clone((*old)[k]), func(id string) bool { return slices.Contains(ids, id) })
		if c.freeNodes.CompareAndSwap(old, &free) {
			return
		}
	}
}

// publishFree keeps, for PlaceSubmitted, the free nodes a turn left (the
// free nodes it placed on, snodes, less the ones it assigned, busy), by
// compute key and in ID order.
func (c *Controller) publishFree(snodes []scheduler.Node, busy map[string]string) {
	free := map[string][]string{}
	for _, n := range snodes {
		if _, ok := busy[n.ID]; !ok {
			free[n.Compute] = append(free[n.Compute], n.ID)
		}
	}
	for _, ids := range free {
		slices.Sort(ids)
	}
	c.freeNodes.Store(&free)
}
