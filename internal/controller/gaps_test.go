package controller

import (
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestGapTrackerFeedsAdaptiveComputes checks that only adaptive computes
// get a history and that each idle node and submit is fed once.
func TestGapTrackerFeedsAdaptiveComputes(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	adaptive := &api.Compute{Workspace: "ws", Name: "gpu", Tide: &api.ComputeExtensions{ScaleDownPolicy: api.ScaleDownAdaptive}}
	fixed := &api.Compute{Workspace: "ws", Name: "cpu"}
	computes := map[string]*api.Compute{"ws/gpu": adaptive, "ws/cpu": fixed}
	s := &snapshot{
		nodes: []api.Node{
			{ID: "a", Workspace: "ws", Compute: "gpu", State: api.NodeIdle, StateSince: t0},
			{ID: "b", Workspace: "ws", Compute: "cpu", State: api.NodeIdle, StateSince: t0},
		},
		jobs: []api.Job{{Workspace: "ws", Name: "j1", Compute: "gpu", CreatedOn: t0.Add(30 * time.Second)}},
	}
	g := newGapTracker(0)
	for range 2 { // the second turn sees the same state: nothing new
		h := g.observe(s, computes)
		if len(h) != 1 || h["ws/gpu"] == nil {
			t.Fatalf("histories for %v, want ws/gpu only", h)
		}
		if got := h["ws/gpu"].Closed(); got != 1 {
			t.Errorf("closed gaps %d, want 1 (node a reused 30s later)", got)
		}
		if got := h["ws/gpu"].DemandSince(t0); got != 1 {
			t.Errorf("demand since t0 %d, want 1", got)
		}
	}
	adaptive.Tide = nil
	if h := g.observe(s, computes); len(h) != 0 {
		t.Errorf("histories %v after the compute left adaptive, want none", h)
	}
}
