package controller

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/store"
)

// TestPendingReasonEstimatesStart checks the estimate in the "nodes
// starting" pending reason: the median time the compute's nodes took from
// creation to registration, added to the newest starting node's creation,
// kept after the nodes that taught it are gone, and absent while tide has
// never seen a node of the compute start.
func TestPendingReasonEstimatesStart(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	t0 := now.Add(-time.Hour)
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 5}, ""); err != nil {
			return err
		}
		return tx.PutJob(ctx, &api.Job{Workspace: "default", Name: "j", Type: "command", Command: "true", Compute: "c", Status: api.JobQueued}, "")
	})
	c := New(Options{Store: st, Config: config.Default(), Hub: NewHub(), Changes: NewBroadcast(), Log: slog.New(slog.DiscardHandler)})
	reason := func() string {
		t.Helper()
		s, err := c.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.learnStartTimes() // as Step does before deciding
		w := []scheduler.Waiting{{Job: "default/j", Compute: "default/c", Need: 1, Reason: scheduler.ReasonInsufficientNodes}}
		if err := c.commit(ctx, c.reasons(scheduler.Result{Waiting: w}, nil, autoscaler.Result{}, s, nil, now)); err != nil {
			t.Fatal(err)
		}
		var j *api.Job
		_ = st.View(ctx, func(tx store.Tx) (err error) { j, err = tx.GetJob(ctx, "default", "j"); return err })
		return j.PendingReason
	}
	node := func(id, state string, created time.Time, took time.Duration) *api.Node {
		n := &api.Node{ID: id, Workspace: "default", Compute: "c", State: state, CreatedOn: created}
		if took > 0 {
			n.RegisteredOn = created.Add(took)
		}
		return n
	}

	mustUpdate(t, st, func(tx store.Tx) error {
		return tx.PutNode(ctx, node("s1", api.NodePreparing, now.Add(-3*time.Second), 0))
	})
	if r := reason(); r != "waiting for 1 node(s): 1 starting since 06:59:57" {
		t.Errorf("no node ever started: reason %q, want no estimate", r)
	}

	mustUpdate(t, st, func(tx store.Tx) error {
		for i, took := range []time.Duration{10 * time.Second, 12 * time.Second, 30 * time.Second} {
			if err := tx.PutNode(ctx, node("r"+string(rune('1'+i)), api.NodeIdle, t0, took)); err != nil {
				return err
			}
		}
		return tx.PutNode(ctx, node("s2", api.NodePreparing, now.Add(-2*time.Second), 0))
	})
	const want = "waiting for 1 node(s): 2 starting since 06:59:57; expected by about 07:00:10 (its nodes take 12s to start)"
	if r := reason(); r != want {
		t.Errorf("reason %q,\nwant %q", r, want)
	}
	// The nodes that started are gone: the estimate stays.
	mustUpdate(t, st, func(tx store.Tx) error {
		for _, id := range []string{"r1", "r2", "r3"} {
			if err := tx.DeleteNode(ctx, id); err != nil {
				return err
			}
		}
		return nil
	})
	if r := reason(); !strings.Contains(r, "(its nodes take 12s to start)") {
		t.Errorf("after scale-down: reason %q, want the estimate kept", r)
	}
	// What the provider says a starting node waits for is the job's too.
	mustUpdate(t, st, func(tx store.Tx) error {
		n := node("s2", api.NodePreparing, now.Add(-2*time.Second), 0)
		n.Error = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu"
		return tx.PutNode(ctx, n)
	})
	if r := reason(); !strings.HasSuffix(r, "(its nodes take 12s to start); node s2: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu") {
		t.Errorf("with a starting node's provider reason: %q", r)
	}
}
