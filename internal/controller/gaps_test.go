package controller

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/store"
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
		h := g.observe(s, computes, nil, nil)
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
	if h := g.observe(s, computes, nil, nil); len(h) != 0 {
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

// TestGapsFollowChanges checks that the adaptive histories learned from
// what was written since the last turn (gapChanges) equal those learned by
// walking every node and job each turn, over random turns: nodes turning
// idle (some registering idle), jobs submitted (some with times before
// what a history has seen) and finishing, computes made adaptive and
// fixed again.
func TestGapsFollowChanges(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	r := rand.New(rand.NewPCG(7, 8))
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	c := New(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	names := []string{"a", "b", "c"}
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		for _, n := range names {
			if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: n, IdleTimeBeforeScaleDown: 120}, ""); err != nil {
				return err
			}
		}
		return nil
	})
	inc, full := newGapTracker(0), newGapTracker(0)
	var nodes, jobs []string
	seq := 0
	for step := range 300 {
		now = now.Add(time.Duration(1+r.IntN(20)) * time.Second)
		mustUpdate(t, st, func(tx store.Tx) error {
			for range 1 + r.IntN(4) {
				// Some writes carry a time before what was seen already.
				at := now.Add(-time.Duration(r.IntN(3)) * 15 * time.Second)
				compute := names[r.IntN(len(names))]
				switch op := r.IntN(10); {
				case op < 2: // a compute made adaptive or fixed
					cp, err := tx.GetCompute(ctx, "ws", compute)
					if err != nil {
						return err
					}
					cp.Tide = nil
					if r.IntN(2) == 0 {
						cp.Tide = &api.ComputeExtensions{ScaleDownPolicy: api.ScaleDownAdaptive}
					}
					if err := tx.PutCompute(ctx, cp, ""); err != nil {
						return err
					}
				case op < 5 || len(nodes) == 0: // a node turns idle (or registers idle)
					n := &api.Node{ID: fmt.Sprintf("n%02d", r.IntN(30)), Workspace: "ws", Compute: compute, State: api.NodeIdle, StateSince: at}
					if old, err := tx.GetNode(ctx, n.ID); err == nil {
						n.Compute = old.Compute
					} else {
						nodes = append(nodes, n.ID)
					}
					if r.IntN(4) == 0 {
						n.RegisteredOn = at
					} else if r.IntN(3) == 0 {
						n.State = api.NodeRunning
					}
					if err := tx.PutNode(ctx, n); err != nil {
						return err
					}
				case op < 8: // a job submitted, queued or started at once
					seq++
					j := &api.Job{Workspace: "ws", Name: fmt.Sprintf("j%04d", seq), Type: api.JobTypeCommand, Compute: compute,
						Status: []string{api.JobQueued, api.JobRunning}[r.IntN(2)], CreatedOn: at}
					if r.IntN(3) == 0 {
						j.Resources = &api.JobResources{InstanceCount: 2}
					}
					jobs = append(jobs, j.Name)
					if err := tx.PutJob(ctx, j, ""); err != nil {
						return err
					}
				case len(jobs) > 0: // a job moves on: started, finished, or queued again
					j, err := tx.GetJob(ctx, "ws", jobs[r.IntN(len(jobs))])
					if err != nil {
						return err
					}
					j.Status = []string{api.JobQueued, api.JobRunning, api.JobCompleted}[r.IntN(3)]
					if err := tx.PutJob(ctx, j, ""); err != nil {
						return err
					}
				}
			}
			return nil
		})
		s, err := c.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		computes := map[string]*api.Compute{}
		for i := range s.computes {
			computes[key(s.computes[i].Workspace, s.computes[i].Name)] = &s.computes[i]
		}
		got := inc.observe(s, computes, nil, c.gapChanges(s))
		want := full.observe(s, computes, nil, nil)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(inc.watermk, full.watermk) {
			t.Fatalf("step %d: histories learned from the changes differ from those of a walk of everything:\n%v\nwant\n%v", step, inc.watermk, full.watermk)
		}
	}
	if len(full.byKey) == 0 {
		t.Fatal("no compute was adaptive at the end: the test learned nothing")
	}
}
