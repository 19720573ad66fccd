package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// pushes each assignment to its nodes. computes are the turn's, by key (an
// attempt's identity token is made from its compute). It returns the nodes
// now busy, by node id; a failure is logged, and nothing is busy.
//
// The transaction reads the jobs and their nodes in one statement each and
// writes the nodes, and the jobs with their events, in one each (store.Tx's
// batch methods): a statement per job and node cost a turn placing 100 jobs
// about 20 ms at 10,000 nodes.
func (c *Controller) assign(ctx context.Context, as []scheduler.Assignment, computes map[string]*api.Compute, now time.Time) map[string]string {
	busy, err := c.placeAndWrite(ctx, as, computes, now)
	if err != nil {
		c.log.Error("assigning jobs", "jobs", len(as), "err", err)
	}
	return busy
}

// placeAndWrite writes placements as assign does and, in the same
// transaction, ws (a turn's pending reasons and computes' status), so that
// a turn waits for the store's writer once, not once for its placements
// and again for the rest. It returns the nodes now busy; when the
// transaction fails, none, and each write's failed is called.
func (c *Controller) placeAndWrite(ctx context.Context, as []scheduler.Assignment, computes map[string]*api.Compute, now time.Time, ws ...write) (map[string]string, error) {
	ws = slices.DeleteFunc(ws, func(w write) bool { return w.do == nil })
	busy := map[string]string{}
	if len(as) == 0 && len(ws) == 0 {
		return busy, nil
	}
	var pushes []push
	err := c.store.Update(ctx, func(tx store.Tx) error {
		// A store may run fn again: start from nothing each time.
		busy, pushes = map[string]string{}, nil
		if len(as) > 0 {
			var err error
			if pushes, err = c.place(ctx, tx, as, computes, busy, now); err != nil {
				return err
			}
		}
		for _, w := range ws {
			if err := w.do(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for _, w := range ws {
			if w.failed != nil {
				w.failed()
			}
		}
		return map[string]string{}, err
	}
	for _, p := range pushes {
		c.hub.Push(p.node, Message{Kind: "assign", Data: p.a})
	}
	if len(as) > 0 {
		c.changes.Notify()
	}
	return busy, nil
}

// place writes, in tx, each placement's attempt on its nodes and returns
// what to push to each node; busy gets the nodes it gave a job. A
// placement the store no longer allows (errMoved: the job left the queue,
// a node is not idle any more) is skipped; the next turn decides again.
// Every precondition is checked before anything is written.
func (c *Controller) place(ctx context.Context, tx store.Tx, as []scheduler.Assignment, computes map[string]*api.Compute, busy map[string]string, now time.Time) ([]push, error) {
	keys := make([]store.JobKey, len(as))
	var ids []string
	for i, a := range as {
		ws, name, _ := strings.Cut(a.Job, "/")
		keys[i] = store.JobKey{Workspace: ws, Name: name}
		ids = append(ids, a.Nodes...)
	}
	js, err := tx.ListJobs(ctx, store.JobFilter{Keys: keys})
	if err != nil {
		return nil, err
	}
	jobs := make(map[string]*api.Job, len(js))
	for i := range js {
		jobs[key(js[i].Workspace, js[i].Name)] = &js[i]
	}
	ns, err := tx.GetNodes(ctx, ids)
	if err != nil {
		return nil, err
	}
	nodes := make(map[string]*api.Node, len(ns))
	for i := range ns {
		nodes[ns[i].ID] = &ns[i]
	}
	var (
		pushes   []push
		putJobs  []store.JobPut
		putNodes []*api.Node
	)
	for _, a := range as {
		cur, placed, err := c.placeOne(ctx, tx, a, jobs, nodes, busy, computes, now)
		if errors.Is(err, errMoved) {
			c.log.Info("placement skipped", "job", a.Job, "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("assigning job %s: %w", a.Job, err)
		}
		if cur.Status == api.JobFailed {
			putJobs = append(putJobs, store.JobPut{Job: cur, Events: []*api.Event{{Time: now, Kind: "Failed", Message: cur.Error}}})
			continue
		}
		putJobs = append(putJobs, store.JobPut{Job: cur, Events: []*api.Event{{Time: now, Kind: "Assigned",
			Message: fmt.Sprintf("attempt %d placed on %s", cur.Attempt, strings.Join(a.Nodes, ", "))}}})
		for _, p := range placed {
			putNodes = append(putNodes, nodes[p.node])
			busy[p.node] = a.Job
		}
		pushes = append(pushes, placed...)
	}
	if err := tx.PutNodes(ctx, putNodes); err != nil {
		return nil, err
	}
	return pushes, tx.PutJobs(ctx, putJobs)
}

// placeOne checks placement a against the stored job and nodes (jobs and
// nodes, read in the transaction; busy the nodes earlier placements of
// this transaction took) and, when it may go ahead, sets the job's new
// attempt and the nodes' job in them, returning the job to write and what
// to push to each node. A job whose secret was deleted since submission
// is returned failed instead, with nothing to push.
func (c *Controller) placeOne(ctx context.Context, tx store.Tx, a scheduler.Assignment, jobs map[string]*api.Job, nodes map[string]*api.Node, busy map[string]string,
	computes map[string]*api.Compute, now time.Time) (*api.Job, []push, error) {
	cur := jobs[a.Job]
	if cur == nil {
		return nil, nil, fmt.Errorf("job %s: %w (deleted)", a.Job, errMoved)
	}
	if cur.Status != api.JobQueued {
		return nil, nil, fmt.Errorf("job %s is %s, not Queued: %w", cur.Name, cur.Status, errMoved)
	}
	for _, nid := range a.Nodes {
		n := nodes[nid]
		if n == nil {
			return nil, nil, fmt.Errorf("node %s: %w (removed)", nid, errMoved)
		}
		if n.State != api.NodeIdle || n.Job != "" || busy[nid] != "" {
			return nil, nil, fmt.Errorf("node %s is %s, not idle: %w", nid, n.State, errMoved)
		}
	}
	cur.Attempt++
	cur.Status, cur.PendingReason = api.JobPreparing, ""
	cur.Ranks = nil
	cp := computes[key(cur.Workspace, cur.Compute)]
	if cp == nil && c.identityToken != nil {
		// Not among the turn's ready computes (a caller without them).
		var err error
		if cp, err = tx.GetCompute(ctx, cur.Workspace, cur.Compute); err != nil && !store.IsNotFound(err) {
			return nil, nil, err
		}
	}
	secrets, err := service.LoadJobSecrets(ctx, tx, c.secretBox, cur, cp, c.identityToken)
	if err != nil {
		// A secret deleted since submission: the job cannot run.
		cur.Status, cur.Error, cur.EndTime = api.JobFailed, err.Error(), now
		return cur, nil, nil
	}
	id := service.AssignmentID(cur.Workspace, cur.Name, cur.Attempt)
	addrs := make([]string, len(a.Nodes))
	for i, nid := range a.Nodes {
		n := nodes[nid]
		n.Job, n.State, n.StateSince = id, api.NodeRunning, now
		cur.Ranks = append(cur.Ranks, api.JobRank{Node: n.ID})
		addrs[i] = n.Address
	}
	runtime := c.Runtime(nodes[a.Nodes[0]].Location)
	pushes := make([]push, len(a.Nodes))
	for rank, nid := range a.Nodes {
		as := service.AssignmentFor(cur, rank, addrs, runtime, int(c.cfg.CancelGrace.Seconds()))
		secrets.Apply(&as)
		pushes[rank] = push{node: nid, a: as}
	}
	return cur, pushes, nil
}
