package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/store"
)

// reconcile matches what the providers hold with the store after a start,
// in the background (one goroutine per location, see effects.go): agents
// the store does not know are stopped (no orphans); nodes the providers no
// longer hold come back to the turn as checks that say so, which make them
// unusable and replaced (no forgotten nodes). done is closed once every
// location is reconciled.
func (c *Controller) reconcile(ctx context.Context) (done <-chan struct{}, err error) {
	all := make(chan struct{})
	var computes []api.Compute
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		computes, err = tx.ListComputes(ctx, "")
		return err
	}); err != nil {
		close(all)
		return all, err
	}
	locations := maps.Clone(c.providers)
	for _, cp := range computes {
		if p, ok := c.provider(ctx, cp.Location); ok && cp.IsAttached() {
			locations[cp.Location] = p
		}
	}
	var wg sync.WaitGroup
	for loc, p := range locations {
		wg.Go(func() {
			if err := c.reconcileLocation(ctx, loc, p); err != nil && ctx.Err() == nil {
				c.log.Error("reconciling providers", "location", loc, "err", err)
			}
		})
	}
	go func() {
		wg.Wait()
		close(all)
	}()
	return all, nil
}

// reconcileLocation reconciles one location. The store is read after the
// provider's list: a node's record is written before its provider is asked
// for it, so every node the list holds that a turn is creating has a
// record by then; and only the records older than the list are judged
// against it.
func (c *Controller) reconcileLocation(ctx context.Context, loc string, p provider.Provider) error {
	listed := c.now().UTC()
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	pnodes, err := p.List(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("listing nodes of location %s: %w", loc, err)
	}
	var nodes []api.Node
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		nodes, err = tx.ListNodes(ctx, "", "")
		return err
	}); err != nil {
		return err
	}
	known := map[string]bool{}
	for _, n := range nodes {
		known[n.ID] = true
	}
	var errs []error
	held := map[string]bool{}
	for _, pn := range pnodes {
		held[pn.ID] = true
		if !known[pn.ID] {
			c.log.Info("stopping orphan agent", "node", pn.ID, "location", loc)
			dctx, cancel := context.WithTimeout(ctx, callTimeout)
			if err := p.Delete(dctx, pn.ID); err != nil && !provider.IsNotFound(err) {
				errs = append(errs, err)
			}
			cancel()
		}
	}
	var gone []nodeCheck
	for _, n := range nodes {
		if n.Location == loc && !held[n.ID] && n.State != api.NodeUnusable && n.CreatedOn.Before(listed) {
			gone = append(gone, checkOf(&n, nil, &provider.NotFoundError{ID: n.ID}))
		}
	}
	if len(gone) > 0 {
		c.reportChecks(gone...)
		c.Notify()
	}
	return errors.Join(errs...)
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
