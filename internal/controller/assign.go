package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// errMoved is a placement the store no longer allows: the job left the
// queue or a node stopped being idle since the turn's read. The turn skips
// it; the next one decides again.
var errMoved = errors.New("state moved since the turn's read")

// push is one assignment to send to a node once it is committed.
type push struct {
	node string
	a    api.Assignment
}

// assign gives queued jobs their nodes in one transaction (one commit for
// all of a turn's placements, not one per job) and, once it is committed,
// pushes each assignment to its nodes. computes are the turn's, by key: an
// attempt's identity token is made from its compute as the turn read it,
// not read again per job. It returns the nodes now busy, by node id.
func (c *Controller) assign(ctx context.Context, as []scheduler.Assignment, computes map[string]*api.Compute, now time.Time) map[string]string {
	busy := map[string]string{}
	if len(as) == 0 {
		return busy
	}
	var pushes []push
	err := c.store.Update(ctx, func(tx store.Tx) error {
		// A store may run fn again: start from nothing each time.
		pushes, busy = nil, map[string]string{}
		for _, a := range as {
			ws, name, _ := strings.Cut(a.Job, "/")
			p, err := c.assignOne(ctx, tx, ws, name, a.Nodes, computes, now)
			if errors.Is(err, errMoved) {
				c.log.Info("placement skipped", "job", a.Job, "err", err)
				continue
			}
			if err != nil {
				return fmt.Errorf("assigning job %s: %w", a.Job, err)
			}
			pushes = append(pushes, p...)
			for _, n := range a.Nodes {
				busy[n] = a.Job
			}
		}
		return nil
	})
	if err != nil {
		c.log.Error("assigning jobs", "jobs", len(as), "err", err)
		return map[string]string{}
	}
	for _, p := range pushes {
		c.hub.Push(p.node, Message{Kind: "assign", Data: p.a})
	}
	c.changes.Notify()
	return busy
}

// assignOne writes, in tx, job ws/name's attempt on nodeIDs and returns what to
// push to each node (nothing when the job failed instead: a secret it names
// was deleted). It checks every precondition before it writes, so that a
// placement it refuses (errMoved) leaves nothing half-written in tx.
func (c *Controller) assignOne(ctx context.Context, tx store.Tx, ws, name string, nodeIDs []string, computes map[string]*api.Compute, now time.Time) ([]push, error) {
	cur, err := tx.GetJob(ctx, ws, name)
	if store.IsNotFound(err) {
		return nil, fmt.Errorf("job %s: %w (deleted)", name, errMoved)
	}
	if err != nil {
		return nil, err
	}
	if cur.Status != api.JobQueued {
		return nil, fmt.Errorf("job %s is %s, not Queued: %w", name, cur.Status, errMoved)
	}
	nodes := make([]*api.Node, len(nodeIDs))
	for i, nid := range nodeIDs {
		n, err := tx.GetNode(ctx, nid)
		if store.IsNotFound(err) {
			return nil, fmt.Errorf("node %s: %w (removed)", nid, errMoved)
		}
		if err != nil {
			return nil, err
		}
		if n.State != api.NodeIdle || n.Job != "" {
			return nil, fmt.Errorf("node %s is %s, not idle: %w", nid, n.State, errMoved)
		}
		nodes[i] = n
	}
	cur.Attempt++
	cur.Status, cur.PendingReason = api.JobPreparing, ""
	cur.Ranks = nil
	cp := computes[key(cur.Workspace, cur.Compute)]
	if cp == nil && c.identityToken != nil {
		// Not among the turn's ready computes (a caller without them).
		if cp, err = tx.GetCompute(ctx, cur.Workspace, cur.Compute); err != nil && !store.IsNotFound(err) {
			return nil, err
		}
	}
	secrets, err := service.LoadJobSecrets(ctx, tx, c.secretBox, cur, cp, c.identityToken)
	if err != nil {
		// A secret deleted since submission: the job cannot run.
		cur.Status, cur.Error, cur.EndTime = api.JobFailed, err.Error(), now
		return nil, tx.PutJob(ctx, cur, "", &api.Event{Time: now, Kind: "Failed", Message: err.Error()})
	}
	id := service.AssignmentID(cur.Workspace, cur.Name, cur.Attempt)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		n.Job, n.State, n.StateSince = id, api.NodeRunning, now
		if err := tx.PutNode(ctx, n); err != nil {
			return nil, err
		}
		cur.Ranks = append(cur.Ranks, api.JobRank{Node: n.ID})
		addrs[i] = n.Address
	}
	if err := tx.PutJob(ctx, cur, "", &api.Event{Time: now, Kind: "Assigned",
		Message: fmt.Sprintf("attempt %d placed on %s", cur.Attempt, strings.Join(nodeIDs, ", "))}); err != nil {
		return nil, err
	}
	runtime := c.Runtime(nodes[0].Location)
	pushes := make([]push, len(nodes))
	for rank, n := range nodes {
		a := service.AssignmentFor(cur, rank, addrs, runtime, int(c.cfg.CancelGrace.Seconds()))
		secrets.Apply(&a)
		pushes[rank] = push{node: n.ID, a: a}
	}
	return pushes, nil
}
