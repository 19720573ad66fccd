package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// reconcile matches what the providers hold with the store after a start:
// agents the store does not know are stopped (no orphans); nodes the
// providers no longer hold become unusable and are replaced (no forgotten
// nodes).
func (c *Controller) reconcile(ctx context.Context) error {
	s, err := c.load(ctx)
	if err != nil {
		return err
	}
	known := map[string]api.Node{}
	for _, n := range s.nodes {
		known[n.ID] = n
	}
	now := c.now().UTC()
	var errs []error
	locations := maps.Clone(c.providers)
	for _, cp := range s.computes {
		if p, ok := c.provider(ctx, cp.Location); ok && cp.IsAttached() {
			locations[cp.Location] = p
		}
	}
	for loc, p := range locations {
		pnodes, err := p.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing nodes of location %s: %w", loc, err))
			continue
		}
		held := map[string]bool{}
		for _, pn := range pnodes {
			held[pn.ID] = true
			if _, ok := known[pn.ID]; !ok {
				c.log.Info("stopping orphan agent", "node", pn.ID, "location", loc)
				if err := p.Delete(ctx, pn.ID); err != nil && !provider.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
		}
		for _, n := range s.nodes {
			if n.Location == loc && !held[n.ID] && n.State != api.NodeUnusable {
				if err := c.markUnusable(ctx, n, "the provider no longer holds the node", now); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkProviders marks nodes whose agent process is gone unusable, without
// waiting for the heartbeat timeout, and shows why a preparing node waits
// (a Slurm job's pending reason) as the node's error until it registers.
func (c *Controller) checkProviders(ctx context.Context) error {
	s, err := c.load(ctx)
	if err != nil {
		return err
	}
	now := c.now().UTC()
	// A stopping instance's node is the instances phase's to finish: its
	// provider no longer lists it, and deleting it would lose its disk.
	instanceNodes := map[string]bool{}
	for _, cp := range s.computes {
		if cp.IsInstance() {
			instanceNodes[cp.Instance.Node] = true
		}
	}
	for _, n := range s.nodes {
		if n.State == api.NodeLeaving && instanceNodes[n.ID] {
			continue
		}
		// Leaving nodes that tide is not deleting are those whose agent
		// said it is stopping: the provider says why.
		if n.State != api.NodeIdle && n.State != api.NodeRunning && n.State != api.NodePreparing && n.State != api.NodeLeaving || c.isInflight(n.ID) {
			continue
		}
		p, ok := c.provider(ctx, n.Location)
		if !ok {
			continue
		}
		pn, err := p.Get(ctx, n.ID)
		left := n.State == api.NodeLeaving
		switch {
		case left && (provider.IsNotFound(err) || err == nil && pn.State == provider.StateExited ||
			now.Sub(n.StateSince) > c.cfg.UnusableAfter+c.cfg.PreemptGrace):
			// Its agent is gone (or took longer to stop than any grace).
			c.removeNode(ctx, n, n.Error)
			err = nil
		case left && err == nil && pn.State != provider.StatePreempted:
			continue // still stopping
		case provider.IsNotFound(err):
			err = c.markUnusable(ctx, n, "the provider no longer holds the node", now)
		case err != nil:
			// The backend cannot tell now (an ssh host cut off, a Slurm
			// controller restarting): the heartbeats decide; check the
			// other nodes.
			c.log.Warn("checking node", "node", n.ID, "err", err)
			continue
		case pn.State == provider.StateExited:
			err = c.markUnusable(ctx, n, "agent exited: "+pn.Reason, now)
		case pn.State == provider.StatePreempted:
			err = service.MarkPreempted(ctx, c.store, n.ID, cmp.Or(pn.Reason, "the provider took the node away"), now)
		case n.State == api.NodePreparing && pn.Reason != n.Error:
			err = c.store.Update(ctx, func(tx store.Tx) error {
				cur, err := tx.GetNode(ctx, n.ID)
				if err != nil || cur.State != api.NodePreparing {
					return err
				}
				cur.Error = pn.Reason
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

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
