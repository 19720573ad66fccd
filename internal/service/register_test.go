package service

import (
	"context"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// TestRegisterKeepsAPreemptedNode: an agent registers again (the server
// restarted, or its stream broke) after its node was preempted. The node
// must stay preempted: registering made it running again (with its job)
// or idle (without), so the eviction notice was never sent, the job ran on
// as if nothing had happened and the node took new jobs while no capacity
// could replace it; the chaos suite's preemption-then-no-capacity scenario
// found retried attempts starting inside the outage on such nodes.
func TestRegisterKeepsAPreemptedNode(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 0, 10, 0, 0, time.UTC)
	id := AssignmentID("default", "count", 1)
	st := seedStore(t, &api.Compute{Name: "spot", Workspace: "default", MaxInstances: 2, Tier: api.TierLowPriority},
		[]*api.Node{
			{ID: "busy", Workspace: "default", Compute: "spot", State: api.NodeRunning, Job: id},
			{ID: "idle", Workspace: "default", Compute: "spot", State: api.NodeIdle},
		},
		&api.Job{Workspace: "default", Name: "count", Type: "command", Command: "true", Compute: "spot",
			Status: api.JobRunning, Attempt: 1, Ranks: []api.JobRank{{Node: "busy", Status: api.JobRunning}}})
	s := &Service{Store: st, Now: func() time.Time { return now }}
	for _, n := range []string{"busy", "idle"} {
		if _, err := s.PreemptNode(ctx, "default", "spot", n, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []api.AgentHello{
		{NodeID: "busy", Running: []api.AssignmentStatus{{ID: id, Status: api.JobRunning}}},
		{NodeID: "idle"},
	} {
		w, err := s.Register(ctx, h.NodeID, h)
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Cancel) != 0 {
			t.Errorf("node %s: told to cancel %v; its job's attempt ends by the eviction notice, as for any preempted node", h.NodeID, w.Cancel)
		}
		var n *api.Node
		if err := st.View(ctx, func(tx store.Tx) (err error) {
			n, err = tx.GetNode(ctx, h.NodeID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n.State != api.NodePreempted {
			t.Errorf("node %s is %s after its agent registered again; want it to stay preempted", h.NodeID, n.State)
		}
	}
}

// TestRegisterStopsARankTheStoreEnded: a gang's rank 0 was lost with its
// node (RankLost failed it; the job finalizes on rank 1's node), then the
// node's agent comes back still running rank 0. Registration must stop it
// and not keep the node running for it (the next heartbeat would cancel
// the rank anyway, and the node stayed "running" with no job).
func TestRegisterStopsARankTheStoreEnded(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 0, 50, 0, 0, time.UTC)
	id := AssignmentID("default", "g", 1)
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 2},
		[]*api.Node{
			{ID: "n1", Workspace: "default", Compute: "c", State: api.NodeUnusable},
			{ID: "n2", Workspace: "default", Compute: "c", State: api.NodeRunning, Job: id},
		},
		&api.Job{Workspace: "default", Name: "g", Type: "command", Command: "true", Compute: "c",
			Status: api.JobFinalizing, Attempt: 1, Ranks: []api.JobRank{{Node: "n1", Status: api.JobFailed}, {Node: "n2", Status: api.JobRunning}}})
	s := &Service{Store: st, Now: func() time.Time { return now }}
	w, err := s.Register(ctx, "n1", api.AgentHello{NodeID: "n1", Running: []api.AssignmentStatus{{ID: id, NodeRank: 0, Status: api.JobRunning}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Cancel) != 1 || w.Cancel[0] != id {
		t.Errorf("told to cancel %v; want the ended rank %s stopped", w.Cancel, id)
	}
	var n *api.Node
	if err := st.View(ctx, func(tx store.Tx) (err error) {
		n, err = tx.GetNode(ctx, "n1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n.State != api.NodeIdle || n.Job != "" {
		t.Errorf("node n1 is %s with job %q; want it idle", n.State, n.Job)
	}
}
