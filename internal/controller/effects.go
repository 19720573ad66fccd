package controller

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// Provider calls never run inside a turn: a host that does not answer
// holds a call for its provider's whole timeout (an ssh host cut off: the
// location's timeout), and a turn waiting on it would stall every other
// compute's jobs (issue 20). Creates and deletes run in the background
// (launch, removeNode), tracked in flight; checks of nodes and the
// reconciliation after a start run in the background too and hand their
// answers back as nodeChecks, which the next turn judges (judgeCheck, a
// pure function) and applies; one-off calls of a turn (a deleted
// instance's disk, an attached machine's detach) go through effect.

// callTimeout bounds a provider call the controller makes in the
// background other than a create (bound by the provision timeout). The
// providers bound their own calls more tightly (the ssh provider by its
// timeout); this is for one that does not.
const callTimeout = 2 * time.Minute

// reconcileWait is how long the first turn after a start waits for the
// reconciliation with the providers.
const reconcileWait = 5 * time.Second

// checkWorkers is how many nodes of one location are checked at once: a
// location's nodes on a host that hangs do not hold up the others'.
const checkWorkers = 8

// nodeCheck is what a provider said about a node, and the node's state as
// the check saw it (not the whole node: a round checks every node, and
// copies of 10,000 records were most of what a heartbeating server
// allocated).
type nodeCheck struct {
	id, state string
	since     time.Time // StateSince
	pn        *provider.Node
	err       error
}

// checkOf is a check of node n, which the provider answered pn, err.
func checkOf(n *api.Node, pn *provider.Node, err error) nodeCheck {
	return nodeCheck{id: n.ID, state: n.State, since: n.StateSince, pn: pn, err: err}
}

// effectRun is a background call started by effect.
type effectRun struct {
	done bool
	err  error
}

// effect runs fn in the background under its own deadline, once per key
// at a time, and reports whether it has finished (and its error). A turn
// calls it until it reports done; the run's end asks for a turn.
func (c *Controller) effect(ctx context.Context, key string, fn func(context.Context) error) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.effects[key]; ok {
		if !r.done {
			return false, nil
		}
		delete(c.effects, key)
		return true, r.err
	}
	r := &effectRun{}
	c.effects[key] = r
	go func() {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := fn(ctx)
		cancel()
		c.mu.Lock()
		r.done, r.err = true, err
		c.mu.Unlock()
		c.Notify()
	}()
	return false, nil
}

// checkable reports whether a node's provider is asked about it: leaving
// nodes that tide is not deleting are those whose agent said it is
// stopping (the provider says why), and a stopping instance's node is the
// instances phase's to finish (its provider no longer lists it, and
// deleting it would lose its disk).
func checkable(n api.Node, instanceNode bool) bool {
	switch n.State {
	case api.NodeIdle, api.NodeRunning, api.NodePreparing:
		return true
	case api.NodeLeaving:
		return !instanceNode
	}
	return false
}

// startChecks asks each location's provider, in the background, whether
// its nodes' agents still run (without waiting for the heartbeat timeout)
// and why a preparing node waits (a Slurm job's pending reason). A
// location whose previous round still runs is skipped.
//
// The nodes and computes are those the last turn read (the feeds'), not
// the store's: a check is applied only to a node still as it was when
// the check began (applyChecks), so a node the last turn did not see
// waits for the next round. At 10,000 nodes reading and decoding every
// node here was 8 % of the server's CPU while the nodes only heartbeat.
// It runs on the loop's goroutine, between turns, as the feeds' reads.
func (c *Controller) startChecks(ctx context.Context) {
	instanceNodes := instanceNodes(c.computes.list)
	byLocation := map[string][]nodeCheck{}
	for i := range c.nodes.list {
		n := &c.nodes.list[i]
		if checkable(*n, instanceNodes[n.ID]) && !c.isInflight(n.ID) {
			byLocation[n.Location] = append(byLocation[n.Location], checkOf(n, nil, nil))
		}
	}
	for loc, ns := range byLocation {
		p, ok := c.provider(ctx, loc)
		if !ok {
			continue
		}
		c.mu.Lock()
		busy := c.checking[loc]
		c.checking[loc] = true
		c.mu.Unlock()
		if busy {
			continue
		}
		go func() {
			defer func() {
				c.mu.Lock()
				delete(c.checking, loc)
				c.mu.Unlock()
				c.Notify()
			}()
			work := make(chan *nodeCheck)
			var wg sync.WaitGroup
			for range min(checkWorkers, len(ns)) {
				wg.Go(func() {
					for ch := range work {
						ctx, cancel := context.WithTimeout(ctx, callTimeout)
						ch.pn, ch.err = p.Get(ctx, ch.id)
						cancel()
						c.reportChecks(*ch)
					}
				})
			}
			for i := range ns {
				work <- &ns[i]
			}
			close(work)
			wg.Wait()
		}()
	}
}

func instanceNodes(computes []api.Compute) map[string]bool {
	m := map[string]bool{}
	for _, cp := range computes {
		if cp.IsInstance() {
			m[cp.Instance.Node] = true
		}
	}
	return m
}

// reportChecks hands checks to the next turn.
func (c *Controller) reportChecks(checks ...nodeCheck) {
	c.mu.Lock()
	c.checks = append(c.checks, checks...)
	c.mu.Unlock()
}

// The verdicts of judgeCheck.
const (
	checkKeep      = iota // nothing to do
	checkUnknown          // the backend cannot tell now: the heartbeats decide
	checkRemove           // a leaving node's agent is gone: delete the node
	checkUnusable         // the agent is gone: the node is unusable
	checkPreempted        // the provider took the node away
	checkPending          // a preparing node waits: show why
)

// judgeCheck decides what a provider's answer about node n (pn, err) means
// at now; leaveGrace is the longest a leaving node's agent may take to stop.
func judgeCheck(n api.Node, pn *provider.Node, err error, now time.Time, leaveGrace time.Duration) (verdict int, reason string) {
	left := n.State == api.NodeLeaving
	switch {
	case left && (provider.IsNotFound(err) || err == nil && pn.State == provider.StateExited || now.Sub(n.StateSince) > leaveGrace):
		return checkRemove, n.Error // its agent is gone, or took longer to stop than any grace
	case left && err == nil && pn.State != provider.StatePreempted:
		return checkKeep, "" // still stopping
	case provider.IsNotFound(err):
		return checkUnusable, "the provider no longer holds the node"
	case err != nil:
		// An ssh host cut off, a Slurm controller restarting.
		return checkUnknown, err.Error()
	case pn.State == provider.StateExited:
		return checkUnusable, "agent exited: " + pn.Reason
	case pn.State == provider.StatePreempted:
		return checkPreempted, cmp.Or(pn.Reason, "the provider took the node away")
	case n.State == api.NodePreparing && pn.Reason != n.Error:
		return checkPending, pn.Reason
	}
	return checkKeep, ""
}

// applyChecks applies the checks reported since the last turn to the nodes
// they are still about: a node that changed since (another state, gone,
// a provider call under way) is left to the next check.
func (c *Controller) applyChecks(ctx context.Context, s *snapshot, now time.Time) error {
	c.mu.Lock()
	checks := c.checks
	c.checks = nil
	c.mu.Unlock()
	if len(checks) == 0 {
		return nil
	}
	instanceNodes := instanceNodes(s.computes)
	for _, ch := range checks {
		kept := c.nodes.node(ch.id) // s.nodes, by id
		if kept == nil {
			continue
		}
		n := *kept
		if n.State != ch.state || !n.StateSince.Equal(ch.since) || !checkable(n, instanceNodes[n.ID]) || c.isInflight(n.ID) {
			continue
		}
		verdict, reason := judgeCheck(n, ch.pn, ch.err, now, c.cfg.UnusableAfter+c.cfg.PreemptGrace)
		var err error
		switch verdict {
		case checkUnknown:
			c.log.Warn("checking node", "node", n.ID, "err", reason)
		case checkRemove:
			c.removeNode(ctx, n, reason, nil)
		case checkUnusable:
			err = c.markUnusable(ctx, n, reason, now)
		case checkPreempted:
			err = service.MarkPreempted(ctx, c.store, n.ID, reason, now)
		case checkPending:
			err = c.store.Update(ctx, func(tx store.Tx) error {
				cur, err := tx.GetNode(ctx, n.ID)
				if err != nil || cur.State != api.NodePreparing {
					return err
				}
				cur.Error = reason
				return tx.PutNode(ctx, cur)
			})
			if store.IsNotFound(err) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
