package controller

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// TestPlaceSubmitted: a job placed in its submission's transaction goes
// where a turn would put it, and only when a turn would place it at once:
// not before the controller's first turn, not while another job of its
// workspace is queued, not on a node the last turn left free and that was
// taken since, not a gang on fewer free nodes than it needs. Placed, the
// job is Preparing on the first free node in ID order, the node runs it,
// and the assignment is pushed only once asked (after the commit).
func TestPlaceSubmitted(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	hub := NewHub()
	ctrl := New(Options{Store: st, Catalog: catalog.Default(), Config: config.Server{HeartbeatInterval: time.Second, UnusableAfter: 10 * time.Second},
		Hub: hub, Changes: NewBroadcast(), Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: "cpu", Type: "amlcompute", Size: "Standard_DS3_v2", MaxInstances: 3,
			ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
			return err
		}
		for _, n := range []api.Node{
			{ID: "a", Workspace: "ws", Compute: "cpu", State: api.NodeRunning, Job: "ws/other/1"}, // taken since the turn
			{ID: "b", Workspace: "ws", Compute: "cpu", State: api.NodeIdle},
			{ID: "c", Workspace: "ws", Compute: "cpu", State: api.NodeIdle},
		} {
			if err := tx.PutNode(ctx, &n); err != nil {
				return err
			}
		}
		return nil
	})
	// The last turn left a, b and c free.
	ctrl.publishFree([]scheduler.Node{{ID: "c", Compute: "ws/cpu"}, {ID: "a", Compute: "ws/cpu"}, {ID: "b", Compute: "ws/cpu"}}, nil)
	sub := hub.Subscribe("b")
	submit := func(name string, instances int) (*api.Job, func()) {
		t.Helper()
		j := &api.Job{Workspace: "ws", Name: name, Type: api.JobTypeCommand, Command: "echo hi", Compute: "cpu", Status: api.JobQueued, CreatedOn: now,
			Resources: &api.JobResources{InstanceCount: instances}}
		var push func()
		mustUpdate(t, st, func(tx store.Tx) error {
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
			var err error
			push, err = ctrl.PlaceSubmitted(ctx, tx, j)
			return err
		})
		return j, push
	}
	if j, push := submit("early", 1); push != nil || j.Status != api.JobQueued {
		t.Fatalf("before the first turn: %s, pushed %v; want left Queued", j.Status, push != nil)
	}
	ctrl.placing.Store(true)
	if j, push := submit("behind", 1); push != nil || j.Status != api.JobQueued {
		t.Fatalf("behind a queued job: %s; want left Queued", j.Status)
	}
	mustUpdate(t, st, func(tx store.Tx) error {
		for _, name := range []string{"early", "behind"} {
			j, err := tx.GetJob(ctx, "ws", name)
			if err != nil {
				return err
			}
			j.Status = api.JobCanceled
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if j, push := submit("gang", 3); push != nil || j.Status != api.JobQueued {
		t.Fatalf("a gang of 3 with 2 nodes free: %s; want left Queued", j.Status)
	}
	// a, found taken, is not read again until the next turn.
	if got := (*ctrl.freeNodes.Load())["ws/cpu"]; !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("free nodes after a was found taken: %v; want [b c]", got)
	}
	mustUpdate(t, st, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, "ws", "gang")
		if err != nil {
			return err
		}
		j.Status = api.JobCanceled
		return tx.PutJob(ctx, j, "")
	})
	j, push := submit("alone", 1)
	if push == nil || j.Status != api.JobPreparing || j.Attempt != 1 || len(j.Ranks) != 1 || j.Ranks[0].Node != "b" {
		t.Fatalf("alone with b and c free: %s attempt %d ranks %+v, pushed %v; want Preparing on b", j.Status, j.Attempt, j.Ranks, push != nil)
	}
	if got := (*ctrl.freeNodes.Load())["ws/cpu"]; !slices.Equal(got, []string{"c"}) {
		t.Errorf("free nodes after alone took b: %v; want [c]", got)
	}
	var n *api.Node
	if err := st.View(ctx, func(tx store.Tx) (err error) { n, err = tx.GetNode(ctx, "b"); return err }); err != nil {
		t.Fatal(err)
	}
	if n.State != api.NodeRunning || n.Job != service.AssignmentID("ws", "alone", 1) {
		t.Errorf("node b: %s job %q; want Running ws/alone/1", n.State, n.Job)
	}
	select {
	case m := <-sub:
		t.Fatalf("pushed %s before the commit was reported", m.Kind)
	default:
	}
	push()
	select {
	case m := <-sub:
		if a, ok := m.Data.(api.Assignment); m.Kind != "assign" || !ok || a.Job != "alone" {
			t.Errorf("pushed %s %+v; want the assignment of alone", m.Kind, m.Data)
		}
	default:
		t.Error("nothing pushed to b")
	}
}

// TestScaleDownKeepsATakenNode: a node the turn read free, and which a
// submission has taken since (PlaceSubmitted), is not removed: no
// ScaleDown event, not marked leaving, no provider call under way.
func TestScaleDownKeepsATakenNode(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ctrl := New(Options{Store: st, Config: config.Server{HeartbeatInterval: time.Second, UnusableAfter: 10 * time.Second},
		Hub: NewHub(), Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	read := api.Node{ID: "n", Workspace: "ws", Compute: "cpu", State: api.NodeIdle, CreatedOn: now}
	taken := read
	taken.State, taken.Job = api.NodeRunning, "ws/j/1"
	mustUpdate(t, st, func(tx store.Tx) error { return tx.PutNode(ctx, &taken) })
	ctrl.scaleDown(ctx, read, "idle for 600s", now)
	var n *api.Node
	var evs []api.Event
	if err := st.View(ctx, func(tx store.Tx) (err error) {
		if n, err = tx.GetNode(ctx, "n"); err != nil {
			return err
		}
		evs, err = tx.ListEvents(ctx, "ws", "compute/cpu", 0, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n.State != api.NodeRunning || n.Job != "ws/j/1" || len(evs) != 0 || ctrl.isInflight("n") {
		t.Errorf("node %s job %q, events %v, removal under way %v; want it kept running its job", n.State, n.Job, evs, ctrl.isInflight("n"))
	}
}
