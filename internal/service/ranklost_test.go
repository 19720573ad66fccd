package service

import (
	"context"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// TestRankLostStopsTheOtherRanksFirst: when one node of a 2-node gang is
// lost (its agent stopped heartbeating: a partition), the other rank's
// process still runs. Its node must stay the job's, and the job must not be
// requeued, until that rank has ended; then the attempt ends as a node
// failure and is retried. (Ending the whole attempt at once freed the other
// node while its rank ran, and the retry could start beside it: the chaos
// suite's partition scenario found two copies of a rank running.)
func TestRankLostStopsTheOtherRanksFirst(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	id := AssignmentID("default", "gang", 1)
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 3},
		[]*api.Node{
			{ID: "n0", Workspace: "default", Compute: "c", State: api.NodeRunning, Job: id},
			{ID: "n1", Workspace: "default", Compute: "c", State: api.NodeRunning, Job: id},
		},
		&api.Job{Workspace: "default", Name: "gang", Type: "command", Command: "true", Compute: "c",
			Status: api.JobRunning, Attempt: 1, Resources: &api.JobResources{InstanceCount: 2},
			Ranks: []api.JobRank{{Node: "n0", Status: api.JobRunning}, {Node: "n1", Status: api.JobRunning}}})
	get := func() (*api.Job, *api.Node) {
		t.Helper()
		var j *api.Job
		var n *api.Node
		if err := st.View(ctx, func(tx store.Tx) (err error) {
			if j, err = tx.GetJob(ctx, "default", "gang"); err != nil {
				return err
			}
			n, err = tx.GetNode(ctx, "n1")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return j, n
	}

	// n0 is lost: the job stops its other rank first.
	if err := RankLost(ctx, st, "default", "gang", 1, "n0", "node n0 became unusable", now); err != nil {
		t.Fatal(err)
	}
	j, n1 := get()
	if j.Status != api.JobFinalizing || j.Attempt != 1 {
		t.Fatalf("after n0 was lost: job %s attempt %d, want Finalizing attempt 1 (its rank on n1 still runs)", j.Status, j.Attempt)
	}
	if n1.Job != id || n1.State != api.NodeRunning {
		t.Fatalf("after n0 was lost: n1 %s running %q, want still running %s", n1.State, n1.Job, id)
	}
	// n1's rank ends (stopped): the attempt ends as a node failure, retried.
	s := &Service{Store: st, Now: func() time.Time { return now }}
	if err := s.ReportStatus(ctx, "n1", api.AssignmentStatus{ID: id, NodeRank: 1, Status: api.JobCanceled}); err != nil {
		t.Fatal(err)
	}
	j, n1 = get()
	if j.Status != api.JobQueued || j.Retried.NodeFailure != 1 {
		t.Fatalf("after the other rank ended: job %s, %d node-failure retries; want Queued, 1", j.Status, j.Retried.NodeFailure)
	}
	if n1.Job != "" || n1.State != api.NodeIdle {
		t.Fatalf("after the other rank ended: n1 %s running %q, want idle", n1.State, n1.Job)
	}
}
