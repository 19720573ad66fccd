package local

import (
	"fmt"
	"time"

	"github.com/tideml/tide/internal/provider"
)

// Outage is a simulated capacity outage of a local location: during its
// window Create fails with an insufficient-capacity error, as a cloud
// region out of a VM size does, so that users (and the chaos suite) can
// watch jobs wait with a pending reason and start once capacity is back.
// Nodes that exist keep running.
type Outage struct {
	// After is when the outage begins, counted from the provider's start
	// (the server's start). Setting capacity_unavailable_after; default 0.
	After time.Duration
	// For is how long it lasts; 0 means no outage. Setting
	// capacity_unavailable_for.
	For time.Duration
}

// window returns the outage's start and end for a provider started at t0.
func (o Outage) window(t0 time.Time) (from, until time.Time) {
	from = t0.Add(o.After)
	return from, from.Add(o.For)
}

// checkOutage is Create's refusal during the outage, nil outside it.
func (p *Provider) checkOutage(req provider.NodeRequest) error {
	if p.cfg.CapacityUnavailable.For <= 0 {
		return nil
	}
	from, until := p.cfg.CapacityUnavailable.window(p.started)
	if now := p.cfg.Now(); now.Before(from) || !now.Before(until) {
		return nil
	}
	return &provider.InsufficientCapacityError{Size: req.Size.Name, Location: req.Location,
		Reason: fmt.Sprintf("capacity unavailable until %s UTC (simulated by the location's capacity_unavailable_for: %s)",
			until.UTC().Format(time.TimeOnly), p.cfg.CapacityUnavailable.For)}
}
