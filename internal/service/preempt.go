package service

import (
	"context"
	"fmt"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// PreemptNode takes a low-priority node away, as a cloud evicts a spot VM:
// the node shows preempted at once, its job gets the eviction notice (SIGTERM
// and the grace period) and is retried on another node from its checkpoint,
// and the node is then deleted. Dedicated nodes cannot be preempted.
func (s *Service) PreemptNode(ctx context.Context, ws, compute, node, reason string) (*api.Node, error) {
	var out *api.Node
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		c, err := s.compute(ctx, tx, ws, compute)
		if err != nil {
			return err
		}
		if c.Tier != api.TierLowPriority {
			e := errorf(409, api.CodeConflict, "compute %s is %s: only nodes of low_priority computes can be preempted", compute, c.Tier)
			e.Field = "tier"
			return e
		}
		n, err := tx.GetNode(ctx, node)
		if store.IsNotFound(err) || err == nil && (n.Workspace != ws || n.Compute != compute) {
			return notFound("node", node, "run 'tide compute list-nodes "+compute+"' to see its nodes")
		}
		if err != nil {
			return err
		}
		out = n
		switch n.State {
		case api.NodePreempted:
			return nil
		case api.NodeLeaving, api.NodeUnusable:
			return errorf(409, api.CodeConflict, "node %s is %s already; it cannot be preempted", node, n.State)
		}
		return markPreempted(ctx, tx, n, reason, s.now())
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "node", node)
	}
	s.notify()
	return out, nil
}

// MarkPreempted records that a node was taken away (the provider reported
// it, or the server's simulated evictions chose it). A node that is
// unusable or already preempted is left as it is; a leaving node is marked
// (the controller checks only those that its agent left, not those it is
// deleting itself).
func MarkPreempted(ctx context.Context, st store.Store, nodeID, reason string, now time.Time) error {
	err := st.Update(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, nodeID)
		if err != nil {
			return err
		}
		if n.State == api.NodePreempted || n.State == api.NodeUnusable {
			return nil
		}
		return markPreempted(ctx, tx, n, reason, now)
	})
	if store.IsNotFound(err) {
		return nil
	}
	return err
}

func markPreempted(ctx context.Context, tx store.Tx, n *api.Node, reason string, now time.Time) error {
	n.State, n.StateSince, n.Error = api.NodePreempted, now, "preempted: "+reason
	if err := tx.PutNode(ctx, n); err != nil {
		return err
	}
	msg := fmt.Sprintf("node %s preempted: %s", n.ID, reason)
	if n.Job != "" {
		if _, name, attempt, err := ParseAssignmentID(n.Job); err == nil {
			msg += fmt.Sprintf("; job %s (attempt %d) gets the eviction notice", name, attempt)
			if err := tx.AddEvent(ctx, n.Workspace, "job/"+name, &api.Event{Time: now, Kind: "NodePreempted", Message: msg}); err != nil {
				return err
			}
		}
	}
	return tx.AddEvent(ctx, n.Workspace, "compute/"+n.Compute, &api.Event{Time: now, Kind: "NodePreempted", Message: msg})
}
