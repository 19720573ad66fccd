package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

func (c *Controller) isInflight(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight[id]
}

// createNodes records new nodes as preparing and asks the provider for them.
func (c *Controller) createNodes(ctx context.Context, cp *api.Compute, count int, reason string, waiting waitingJobs, now time.Time) {
	k := key(cp.Workspace, cp.Name)
	c.mu.Lock()
	b := c.backoff[k]
	c.mu.Unlock()
	if b.Blocks(now) {
		return
	}
	p, ok := c.provider(ctx, cp.Location)
	if !ok {
		return // provisioning() failed the compute, or its provider cannot be built now
	}
	size, _ := c.catalog.Lookup(cp.Size)
	runAs := c.cfg.RunAs(cp.Location)
	var instanceType *api.InstanceType
	switch {
	case cp.VirtualMachine != nil:
		// The machine's own figures, and the attached machines' run_as.
		size, runAs = cp.VirtualMachine.AttachedSize(), c.cfg.Attached.RunAs
	case cp.Kubernetes != nil:
		// A job's Pods on an attached cluster: its instance type.
		name := cp.Kubernetes.Properties.DefaultInstanceType
		it := cp.Kubernetes.Properties.InstanceTypes[name]
		size, runAs, instanceType = spec.KubernetesSize(name, it), c.cfg.Attached.RunAs, &it
	}
	msg := fmt.Sprintf("scaling up by %d node(s): %s", count, reason)
	if len(waiting.first) > 0 {
		msg += fmt.Sprintf(" (queued: %s)", strings.Join(firstN(waiting.first, waiting.total), ", "))
	}
	for i := 0; i < count; i++ {
		n := api.Node{
			ID: cp.Name + "-" + randomID(), Compute: cp.Name, Workspace: cp.Workspace, Location: cp.Location,
			Provider: p.Name(), State: api.NodePreparing, CreatedOn: now, StateSince: now,
			VCPUs: size.VCPUs, MemoryGB: size.MemoryGB, GPUs: size.GPUs, PricePerHour: service.PricePerHour(size, cp.Tier),
		}
		err := c.store.Update(ctx, func(tx store.Tx) error {
			if err := tx.PutNode(ctx, &n); err != nil {
				return err
			}
			if i > 0 {
				return nil
			}
			return tx.AddEvent(ctx, cp.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: "ScaleUp", Message: msg})
		})
		if err != nil {
			c.log.Error("recording node", "node", n.ID, "err", err)
			return
		}
		c.claim(n.ID)
		req := provider.NodeRequest{ID: n.ID, Workspace: cp.Workspace, Compute: cp.Name, Location: cp.Location,
			Size: size, Tier: cp.Tier, ServerURL: c.cfg.AgentServerURLs(), CAFingerprint: c.cfg.CAFingerprint, RunAs: runAs, CacheGB: c.cfg.NodeCacheGB(cp.Location), Token: c.nodeToken(n.ID), Runtime: c.Runtime(cp.Location), InstanceType: instanceType}
		if ns := cp.NetworkSettings; ns != nil {
			req.Network = ns.VnetName
		}
		c.launch(ctx, p, req, "ProvisioningFailed", "creating node")
	}
}

// launch asks the provider for a claimed node in the background and
// records its provider id; a failure is recorded on the compute (code)
// and the node's record goes.
func (c *Controller) launch(ctx context.Context, p provider.Provider, req provider.NodeRequest, code, what string) {
	go func() {
		defer c.release(req.ID)
		// A create that hangs would keep the node in flight, out of
		// liveness's reach: it gets the time a node has to register.
		cctx, cancel := context.WithTimeout(ctx, c.cfg.ProvisionTimeout)
		pn, err := p.Create(cctx, req)
		cancel()
		if err != nil {
			c.log.Warn(what+" failed", "node", req.ID, "err", err)
			c.recordFailure(ctx, req.Workspace, req.Compute, code, fmt.Sprintf("%s %s: %v", what, req.ID, err), c.now().UTC())
			c.undoCreate(ctx, p, req, err)
			return
		}
		_ = c.store.Update(ctx, func(tx store.Tx) error {
			cur, err := tx.GetNode(ctx, req.ID)
			if err != nil {
				return err
			}
			cur.ProviderID = pn.ProviderID
			return tx.PutNode(ctx, cur)
		})
	}()
}

// undoCreate deletes what a failed create may have left before the node's
// record goes: a create that timed out may have started the node all the
// same (an ssh host that answered late keeps the node's folder and agent,
// which count against the host's capacity). The node is leaving
// meanwhile, so an agent that registers takes no job; one that registered
// already is kept (the node works). When the delete fails too, the record
// stays, unusable, and the autoscaler deletes the node again until it is
// gone. An instance's node is stopped instead, keeping its disk.
func (c *Controller) undoCreate(ctx context.Context, p provider.Provider, req provider.NodeRequest, createErr error) {
	id := req.ID
	if !mayHaveCreated(createErr) {
		// The backend answered no (a denied request, no capacity, a
		// name taken by another): the provider made nothing.
		c.forget(ctx, id)
		return
	}
	undo := p.Delete
	if req.Keep {
		st, ok := p.(provider.Stopper)
		if !ok {
			c.forget(ctx, id) // a delete would lose the kept disk
			return
		}
		undo = st.Stop
	}
	var n *api.Node
	err := c.store.Update(ctx, func(tx store.Tx) (err error) {
		if n, err = tx.GetNode(ctx, id); err != nil || n.State != api.NodePreparing {
			return err
		}
		n.State, n.StateSince, n.Error = api.NodeLeaving, c.now().UTC(), fmt.Sprintf("creating it failed: %v", createErr)
		return tx.PutNode(ctx, n)
	})
	if err != nil {
		return // its record is gone (or cannot be read: liveness gives up on it)
	}
	if n.State != api.NodeLeaving {
		c.log.Info("keeping a node whose create failed: its agent registered", "node", id, "state", n.State)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, callTimeout)
	err = undo(dctx, id)
	cancel()
	if err == nil || provider.IsNotFound(err) {
		c.forget(ctx, id)
		return
	}
	c.log.Warn("deleting what a failed create left", "node", id, "err", err)
	reason := fmt.Sprintf("creating it failed (%v) and deleting what it may have left failed too (%v); tide deletes it again", createErr, err)
	if err := c.markUnusable(ctx, *n, reason, c.now().UTC()); err != nil {
		c.log.Warn("marking node unusable", "node", id, "err", err)
	}
}

// mayHaveCreated reports whether a create that failed with err may have
// made its node all the same: it ran out of time, or its connection broke
// while the backend worked. A backend's answer (denied, no capacity, a
// bad request) made nothing.
func mayHaveCreated(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// claim marks a node as having a provider call under way; it reports
// false when one already is.
func (c *Controller) claim(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[id] {
		return false
	}
	c.inflight[id] = true
	return true
}

// release ends a node's provider call and asks for a turn.
func (c *Controller) release(id string) {
	c.mu.Lock()
	delete(c.inflight, id)
	c.mu.Unlock()
	c.Notify()
}

// firstN returns names, the first of total, with how many more there are.
func firstN(names []string, total int) []string {
	if total > len(names) {
		return append(names[:len(names):len(names)], fmt.Sprintf("and %d more", total-len(names)))
	}
	return names
}

// recordFailure notes a provisioning failure on the compute and backs off
// exponentially (autoscaler.Backoff), so a failing backend is not hammered
// in a create/delete loop.
func (c *Controller) recordFailure(ctx context.Context, ws, compute, code, msg string, now time.Time) {
	k := key(ws, compute)
	c.mu.Lock()
	b := c.backoff[k]
	delay := b.Fail(now, msg)
	c.backoff[k] = b
	c.mu.Unlock()
	// The error and its event in one transaction: whoever sees the one
	// sees the other.
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		cp, err := tx.GetCompute(ctx, ws, compute)
		if err != nil {
			return err // a compute deleted meanwhile: nothing to record
		}
		cp.Errors = append(cp.Errors, api.ErrorDetail{Code: code, Message: msg, Time: now})
		if len(cp.Errors) > 10 {
			cp.Errors = cp.Errors[len(cp.Errors)-10:]
		}
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return err
		}
		return tx.AddEvent(ctx, ws, "compute/"+compute, &api.Event{Time: now, Kind: code, Message: fmt.Sprintf("%s (retrying in %s)", msg, delay)})
	})
}

// scaleDown removes an idle, unusable or preempted node.
func (c *Controller) scaleDown(ctx context.Context, n api.Node, reason string, now time.Time) {
	if c.isInflight(n.ID) {
		// Its removal is under way: each turn until it is done asks again,
		// and the compute's events said it once.
		return
	}
	c.removeNode(ctx, n, reason, &api.Event{Time: now, Kind: "ScaleDown", Message: fmt.Sprintf("removing node %s: %s", n.ID, reason)})
}

// removeNode marks a node leaving and deletes it through its provider in
// the background; the record goes when the provider is done. ev, if not
// nil, is written to the node's compute with the mark. A node the turn
// read free (n) that a submission has taken since (PlaceSubmitted) stays.
func (c *Controller) removeNode(ctx context.Context, n api.Node, reason string, ev *api.Event) {
	if !c.claim(n.ID) {
		return
	}
	mark := n.State != api.NodeLeaving && n.State != api.NodeUnusable && n.State != api.NodePreempted
	if mark || ev != nil {
		taken := false
		_ = c.store.Update(ctx, func(tx store.Tx) error {
			taken = false
			var cur *api.Node
			if mark {
				var err error
				if cur, err = tx.GetNode(ctx, n.ID); err != nil {
					return err
				}
				if free(&n) && !free(cur) {
					taken = true
					return nil
				}
			}
			if ev != nil {
				if err := tx.AddEvent(ctx, n.Workspace, "compute/"+n.Compute, ev); err != nil {
					return err
				}
			}
			if !mark {
				return nil
			}
			cur.State, cur.StateSince = api.NodeLeaving, c.now().UTC()
			return tx.PutNode(ctx, cur)
		})
		if taken {
			c.release(n.ID)
			return
		}
	}
	go func() {
		defer c.release(n.ID)
		if p, ok := c.provider(ctx, n.Location); ok {
			dctx, cancel := context.WithTimeout(ctx, callTimeout)
			err := p.Delete(dctx, n.ID)
			cancel()
			if err != nil && !provider.IsNotFound(err) {
				c.log.Warn("deleting node", "node", n.ID, "err", err)
				c.waitBeforeDeleting(ctx, n.ID)
				return
			}
		}
		c.mu.Lock()
		delete(c.deleteFailures, n.ID)
		c.mu.Unlock()
		c.forget(ctx, n.ID)
		c.log.Info("node removed", "node", n.ID, "reason", reason)
	}()
}

// waitBeforeDeleting holds a node whose delete failed in flight before the
// next try, 1 s after the first failure, doubling to a minute: a backend
// that refuses (an API server denying the delete, a host down) is not
// asked again on every turn.
func (c *Controller) waitBeforeDeleting(ctx context.Context, id string) {
	c.mu.Lock()
	c.deleteFailures[id]++
	wait := min(time.Second<<min(c.deleteFailures[id]-1, 6), time.Minute)
	c.mu.Unlock()
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	}
}

// forget removes a node's record, keeping its life and price for cost.
func (c *Controller) forget(ctx context.Context, id string) {
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, id)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		u := store.NodeUsage{Workspace: n.Workspace, Compute: n.Compute, Node: n.ID, Started: n.CreatedOn, Ended: c.now().UTC(), PricePerHour: n.PricePerHour}
		if err := tx.AddNodeUsage(ctx, u); err != nil {
			return err
		}
		return tx.DeleteNode(ctx, id)
	})
	// Its agent, if it still runs, is told at its next heartbeat that
	// the node is gone, not when that heartbeat falls due to be written.
	c.hub.Push(id, Message{Kind: KindSync})
}

// recovered forgets a compute's provisioning failures once a node created
// after the last one registered: the backend works again.
func (c *Controller) recovered(s *snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.backoff) == 0 {
		return
	}
	for i := range s.nodes {
		n := &s.nodes[i]
		k := key(n.Workspace, n.Compute)
		if b, ok := c.backoff[k]; ok && (n.State == api.NodeIdle || n.State == api.NodeRunning) && b.RecoveredBy(n.CreatedOn) {
			delete(c.backoff, k)
		}
	}
}
