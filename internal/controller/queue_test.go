package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/store"
)

// TestQueueFollowsStore checks that the controller's queue, fed from the
// job change feed, holds exactly the store's queued command jobs with their
// compute, size, priority, creation and pending reason, as jobs are
// canceled, reprioritized, resized, started, requeued and submitted, and
// that a new leadership term builds it again from the store whatever the
// last term kept.
func TestQueueFollowsStore(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	c := New(Options{Store: st, Log: slog.New(slog.DiscardHandler)})
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	jobs := map[string]*api.Job{}
	put := func(names ...string) {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error {
			if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
				return err
			}
			for _, n := range names {
				if err := tx.PutJob(ctx, jobs[n], ""); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	job := func(name, compute, status string, at int) {
		jobs[name] = &api.Job{Workspace: "ws", Name: name, Type: api.JobTypeCommand, Compute: compute, Status: status,
			CreatedOn: t0.Add(time.Duration(at) * time.Second)}
	}
	// check compares the queue after a turn's load with the store.
	check := func(what string) {
		t.Helper()
		if _, err := c.load(ctx); err != nil {
			t.Fatal(err)
		}
		want, wantReasons := map[string]scheduler.Job{}, map[string]string{}
		for _, j := range storedQueue(t, st) {
			if j.Type == api.JobTypePipeline || j.Type == api.JobTypeSweep {
				continue
			}
			k := key(j.Workspace, j.Name)
			want[k] = scheduler.Job{Key: k, Compute: key(j.Workspace, j.Compute), Instances: j.InstanceCount(), Priority: j.Priority(), Seq: j.CreatedOn.UnixNano()}
			wantReasons[k] = j.PendingReason
		}
		got := map[string]scheduler.Job{}
		for j := range c.queue.q.All() {
			got[j.Key] = j
		}
		if !maps.Equal(got, want) || c.queue.q.Len() != len(want) {
			t.Errorf("%s: queue %v,\nstore %v", what, got, want)
		}
		if !maps.Equal(c.queue.reasons, wantReasons) {
			t.Errorf("%s: reasons %v, store %v", what, c.queue.reasons, wantReasons)
		}
	}

	for i, n := range []string{"a", "b", "c", "d", "e"} {
		job(n, "cpu", api.JobQueued, i)
	}
	job("run", "cpu", api.JobRunning, 5)
	job("pipe", "", api.JobQueued, 6)
	jobs["pipe"].Type = api.JobTypePipeline
	put("a", "b", "c", "d", "e", "run", "pipe")
	check("first turn")

	jobs["a"].Status = api.JobCancelRequested
	jobs["b"].Status = api.JobCanceled
	jobs["c"].QueueSettings = &api.QueueSettings{Priority: "high"}
	jobs["d"].Resources = &api.JobResources{InstanceCount: 4}
	jobs["d"].PendingReason = "waiting for 4 node(s)"
	jobs["e"].Status = api.JobPreparing
	job("f", "gpu", api.JobQueued, 7)
	put("a", "b", "c", "d", "e", "f")
	check("canceled, reprioritized, resized, started, submitted")

	jobs["e"].Status = api.JobQueued // its node was lost: queued again
	jobs["f"].Compute = "cpu"
	jobs["c"].QueueSettings = nil
	put("e", "f", "c")
	check("requeued, moved, priority back")

	// A term that missed writes (another replica led meanwhile) kept a
	// queue that drifted; the next term builds it from the store.
	c.queue.put(&api.Job{Workspace: "ws", Name: "ghost", Compute: "cpu", Status: api.JobQueued})
	c.queue.put(&api.Job{Workspace: "ws", Name: "d", Compute: "gpu", Status: api.JobQueued})
	c.queue.remove("ws/e")
	c.newTerm()
	check("new term")
}

// TestExplainLooksAtWhatChanged checks that the pending reasons explain
// leaves in the store, looking each turn only at the jobs whose reason can
// have changed, are the ones a controller that looks at every job (a new
// one) would write: after the first turn, after a job arrives, after a
// stored reason is overwritten, after the compute's nodes change, and
// after a placement whose assignment was not written.
func TestExplainLooksAtWhatChanged(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: "cpu", MaxInstances: 3, ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
			return err
		}
		for i := range 3 {
			n := &api.Node{ID: fmt.Sprintf("n%d", i), Workspace: "ws", Compute: "cpu", State: api.NodeRunning, Job: "x"}
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		for i := range 30 {
			j := &api.Job{Workspace: "ws", Name: fmt.Sprintf("j%02d", i), Type: api.JobTypeCommand, Compute: "cpu", Status: api.JobQueued,
				CreatedOn: now.Add(time.Duration(i) * time.Second)}
			if i%7 == 3 {
				j.Resources = &api.JobResources{InstanceCount: 2}
			}
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	// turn runs what decide does for the pending reasons.
	turn := func(c *Controller) {
		t.Helper()
		s, err := c.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var nodes []scheduler.Node
		for _, n := range s.nodes {
			nodes = append(nodes, scheduler.Node{ID: n.ID, Compute: key(n.Workspace, n.Compute), State: n.State, Job: n.Job})
		}
		placed, rests := s.queue.q.Place(nodes, map[string]int{"ws/cpu": 3})
		if err := c.commit(ctx, c.reasons(placed, rests, autoscaler.Result{}, s, nil, now)); err != nil {
			t.Fatal(err)
		}
	}
	reasons := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, j := range storedQueue(t, st) {
			out[j.Name] = j.PendingReason
		}
		return out
	}
	c := New(Options{Store: st, Config: config.Default(), Log: slog.New(slog.DiscardHandler)})
	// agree runs a turn of c and checks that a new controller would
	// change nothing.
	agree := func(what string, want string) {
		t.Helper()
		turn(c)
		got := reasons()
		turn(New(Options{Store: st, Config: config.Default(), Log: slog.New(slog.DiscardHandler)}))
		if full := reasons(); !maps.Equal(got, full) {
			t.Errorf("%s: reasons %v,\nlooking at every job %v", what, got, full)
		}
		if want != "" && got["j20"] != want {
			t.Errorf("%s: j20 waits as %q, want %q", what, got["j20"], want)
		}
	}
	agree("first turn", "compute at max_instances (3 node(s), all busy)")
	mustUpdate(t, st, func(tx store.Tx) error {
		return tx.PutJob(ctx, &api.Job{Workspace: "ws", Name: "new", Type: api.JobTypeCommand, Compute: "cpu", Status: api.JobQueued, CreatedOn: now.Add(time.Hour)}, "")
	})
	agree("a job arrived", "")
	mustUpdate(t, st, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, "ws", "j20")
		if err != nil {
			return err
		}
		j.PendingReason = "overwritten"
		return tx.PutJob(ctx, j, "")
	})
	agree("a reason overwritten", "compute at max_instances (3 node(s), all busy)")
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: "cpu", MaxInstances: 5, ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
			return err
		}
		return tx.PutNode(ctx, &api.Node{ID: "n3", Workspace: "ws", Compute: "cpu", State: api.NodePreparing, CreatedOn: now})
	})
	agree("a node starting", "waiting for 1 node(s): 1 starting since 03:00:00")
	// The node turns idle and j00 is placed on it, but its assignment is
	// not written (here: never; in decide: the node was taken meanwhile).
	mustUpdate(t, st, func(tx store.Tx) error {
		return tx.PutNode(ctx, &api.Node{ID: "n3", Workspace: "ws", Compute: "cpu", State: api.NodeIdle, CreatedOn: now})
	})
	agree("a job placed", "waiting for 1 node(s)")
	// The node is taken and a job of higher priority arrives ahead of
	// j00, which the placement then does not visit: its reason from before
	// it was placed is stale all the same.
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutNode(ctx, &api.Node{ID: "n3", Workspace: "ws", Compute: "cpu", State: api.NodeRunning, Job: "y", CreatedOn: now}); err != nil {
			return err
		}
		return tx.PutJob(ctx, &api.Job{Workspace: "ws", Name: "urgent", Type: api.JobTypeCommand, Compute: "cpu", Status: api.JobQueued,
			CreatedOn: now.Add(time.Hour), QueueSettings: &api.QueueSettings{Priority: "high"}}, "")
	})
	agree("the placement not written", "waiting for 1 node(s)")
	if r := reasons()["j00"]; r != "waiting for 1 node(s)" {
		t.Errorf("j00, placed but not assigned, waits as %q", r)
	}
}

// storedQueue returns the jobs st holds in status Queued.
func storedQueue(t *testing.T, st store.Store) []api.Job {
	t.Helper()
	var js []api.Job
	if err := st.View(context.Background(), func(tx store.Tx) (err error) {
		js, err = tx.ListJobs(context.Background(), store.JobFilter{Statuses: []string{api.JobQueued}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return js
}
