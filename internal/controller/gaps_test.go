package controller

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/store/sqlite"
)

// TestGapTrackerFeedsAdaptiveComputes checks that only adaptive computes
// get a history and that each idle node and submit is fed once.
func TestGapTrackerFeedsAdaptiveComputes(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	adaptive := &api.Compute{Workspace: "ws", Name: "gpu", IdleTimeBeforeScaleDown: 300, Tide: &api.ComputeExtensions{ScaleDownPolicy: api.ScaleDownAdaptive}}
	fixed := &api.Compute{Workspace: "ws", Name: "cpu"}
	computes := map[string]*api.Compute{"ws/gpu": adaptive, "ws/cpu": fixed}
	s := &snapshot{
		nodes: []api.Node{
			{ID: "a", Workspace: "ws", Compute: "gpu", State: api.NodeIdle, StateSince: t0},
			{ID: "b", Workspace: "ws", Compute: "cpu", State: api.NodeIdle, StateSince: t0},
			// Idle since it registered: it goes to the job it was
			// booted for and starts no gap.
			{ID: "c", Workspace: "ws", Compute: "gpu", State: api.NodeIdle, StateSince: t0, RegisteredOn: t0},
		},
		jobs: []*api.Job{{Workspace: "ws", Name: "j1", Compute: "gpu", CreatedOn: t0.Add(30 * time.Second)},
			{Workspace: "ws", Name: "j2", Compute: "gpu", CreatedOn: t0.Add(60 * time.Second)}},
	}
	g := newGapTracker(0)
	for range 2 { // the second turn sees the same state: nothing new
		h := g.observe(s, computes, nil)
		if len(h) != 1 || h["ws/gpu"] == nil {
			t.Fatalf("histories for %v, want ws/gpu only", h)
		}
		if got := h["ws/gpu"].Closed(); got != 1 {
			t.Errorf("closed gaps %d, want 1 (node a reused 30s later; node c just registered, so j2 closes none)", got)
		}
		if got := h["ws/gpu"].Reference; got != 300*time.Second {
			t.Errorf("reference %v, want the compute's idle time 300s", got)
		}
		if got := h["ws/gpu"].DemandSince(t0); got != 2 {
			t.Errorf("demand since t0 %d, want 2", got)
		}
	}
	adaptive.Tide = nil
	if h := g.observe(s, computes, nil); len(h) != 0 {
		t.Errorf("histories %v after the compute left adaptive, want none", h)
	}
}

// TestGapsSurviveRestart: an adaptive compute's history is saved in the
// store, and a new controller (a restarted server) starts from it instead
// of learning again.
func TestGapsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	newCtrl := func() *Controller {
		c := &Controller{store: st, log: slog.New(slog.DiscardHandler), gaps: newGapTracker(0)}
		c.gaps.load = c.loadGaps
		return c
	}
	c1 := newCtrl()
	h := autoscaler.NewGapHistory()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for i := range 300 {
		h.NodeIdle(at)
		at = at.Add(time.Duration(30+i%200) * time.Second)
		h.Demand(at, 1)
	}
	c1.gaps.byKey["default/gpu"], c1.gaps.watermk["default/gpu"] = h, at
	c1.saveGaps(ctx, at)
	if len(c1.gaps.dirty(at.Add(2*time.Minute))) != 0 {
		t.Error("a saved history that learned nothing new is written again")
	}
	c2 := newCtrl()
	got, mark := c2.gaps.load("default/gpu")
	if got == nil || !mark.Equal(at) {
		t.Fatalf("restored %v at %v, want the saved history at %v", got, mark, at)
	}
	wk, ww, _ := h.KeepAlive(at)
	gk, gw, learned := got.KeepAlive(at)
	if got.Closed() != h.Closed() || gk != wk || gw != ww || !learned {
		t.Errorf("restored history: %d gaps, keep-alive %v; saved: %d gaps, keep-alive %v", got.Closed(), gk, h.Closed(), wk)
	}
	if none, _ := c2.gaps.load("default/other"); none != nil {
		t.Error("a compute with no saved history got one")
	}
}
