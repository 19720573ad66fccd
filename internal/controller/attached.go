package controller

import (
	"context"
	"fmt"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/store"
)

// An attached machine's node comes from a provider built from the
// compute's record (Options.AttachedProvider) the first time the
// controller needs it, under the compute's own location
// (api.AttachedLocation); it is dropped when the compute goes.

// Detacher is a provider that leaves its hosts as they were once its
// nodes are deleted (the ssh provider of an attached machine).
type Detacher interface {
	Detach(ctx context.Context) error
}

// provider returns the provider of a location: a configured one, or an
// attached compute's.
func (c *Controller) provider(ctx context.Context, loc string) (provider.Provider, bool) {
	if p, ok := c.providers[loc]; ok {
		return p, true
	}
	ws, name, ok := api.ParseAttachedLocation(loc)
	if !ok || c.attachedProvider == nil {
		return nil, false
	}
	c.mu.Lock()
	p, ok := c.attached[loc]
	c.mu.Unlock()
	if ok {
		return p, true
	}
	var cp *api.Compute
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		cp, err = tx.GetCompute(ctx, ws, name)
		return err
	}); err != nil {
		if !store.IsNotFound(err) {
			c.log.Warn("reading attached compute", "compute", name, "workspace", ws, "err", err)
		}
		return nil, false
	}
	p, err := c.attachedProvider(ctx, cp)
	if err != nil {
		c.log.Warn("building the provider of an attached compute", "compute", name, "workspace", ws, "err", err)
		c.recordFailure(ctx, ws, name, "ProvisioningFailed", fmt.Sprintf("attached %s %s: %v", cp.Type, cp.Name, err), c.now().UTC())
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.attached[loc]; ok {
		return q, true
	}
	c.attached[loc] = p
	return p, true
}

// detached leaves an attached compute's machine as it was (its nodes are
// gone) and forgets its provider.
func (c *Controller) detached(ctx context.Context, comp api.Compute) error {
	p, ok := c.provider(ctx, comp.Location)
	if d, isD := p.(Detacher); ok && isD {
		if err := d.Detach(ctx); err != nil {
			return fmt.Errorf("detaching %s: %w", comp.Name, err)
		}
	}
	c.mu.Lock()
	delete(c.attached, comp.Location)
	c.mu.Unlock()
	return nil
}
