package controller

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/store/postgres"
)

// TestOneJobsStatements counts the SQL statements a no-op job's dispatch
// costs the store on its request paths: its submission, its assignment
// (the controller's write of it, not the turn's reads) and its agent's one
// report that it started and ended. Each budget is what the paths cost now
// (SQLite 8, 9, 9; PostgreSQL 6, 6, 5; before, 13, 11, 13 and 10, 8, 10);
// a read or write added back (the workspace read at submission, the
// compute read for the identity token, a read before each job write, a
// revision statement per write, the node read before it is freed, an
// event in a statement of its own, a savepoint around a request written
// alone) fails it. Each path is counted alone, in a transaction of its
// own.
func TestOneJobsStatements(t *testing.T) {
	// The budgets by store: submission, assignment, report. PostgreSQL's
	// puts record their events in the job's statement, and its BEGIN goes
	// with the first statement (both counted).
	t.Run("sqlite", func(t *testing.T) {
		oneJobsStatements(t, openSQLite(t).(counted), [3]int64{7, 9, 9}, [3]int64{})
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := postgres.Open(t.Context(), pgtest.Start(t), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		// Round trips: BEGIN and the queue's count, the compute, the job,
		// COMMIT; BEGIN and the jobs, the nodes, the nodes' and jobs'
		// writes, COMMIT; BEGIN and the job, the node's and job's
		// writes, COMMIT.
		oneJobsStatements(t, st, [3]int64{5, 6, 5}, [3]int64{4, 4, 3})
	})
}

// counted is a store that counts the statements it runs.
type counted interface {
	store.Store
	Statements() int64
}

// oneJobsStatements holds a job's submission, assignment and report to
// their budgets of statements, and of round trips when trips are given
// (PostgreSQL's: a write transaction's round trips are what this
// replica's other writes wait for).
func oneJobsStatements(t *testing.T, st counted, budgets, trips [3]int64) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cp := &api.Compute{Workspace: "ws", Name: "cpu", Location: "local", Size: "Standard_DS3_v2", MaxInstances: 2,
		ProvisioningState: api.ProvisioningSucceeded}
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return err
		}
		return tx.PutNode(ctx, &api.Node{ID: "n1", Workspace: "ws", Compute: "cpu", State: api.NodeIdle})
	})
	minted := 0
	mint := func(j *api.Job, c *api.Compute) string {
		if c == nil || c.Name != "cpu" {
			t.Errorf("identity token minted for job %s without its compute (got %v)", j.Name, c)
		}
		minted++
		return ""
	}
	svc := &service.Service{Store: st, Config: config.Default(), Now: func() time.Time { return now }, IdentityToken: mint}
	c := New(Options{Store: st, Config: config.Default(), Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		IdentityToken: mint, Changes: NewBroadcast()})

	rt, _ := st.(interface{ RoundTrips() int64 })
	step := 0
	count := func(what string, budget int64, fn func() error) {
		t.Helper()
		n0 := st.Statements()
		var r0 int64
		if rt != nil {
			r0 = rt.RoundTrips()
		}
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := st.Statements() - n0; n > budget {
			t.Errorf("%s ran %d statements, more than its budget of %d", what, n, budget)
		} else {
			t.Logf("%s: %d statements", what, n)
		}
		if want := trips[step]; want > 0 {
			if n := rt.RoundTrips() - r0; n > want {
				t.Errorf("%s took %d round trips, more than its budget of %d", what, n, want)
			} else {
				t.Logf("%s: %d round trips", what, n)
			}
		}
		step++
	}
	var j *api.Job
	// On SQLite: BEGIN, the queue's count, the compute, the revision, the
	// job, its event, COMMIT. (No read of the name: the job's put creates
	// it only if it is free.)
	count("submission", budgets[0], func() (err error) {
		j, err = svc.SubmitJob(ctx, "ws", &api.Job{Type: api.JobTypeCommand, Command: "true", Compute: "cpu"})
		return err
	})
	// On SQLite: BEGIN, the jobs, the nodes, the revision, the nodes, the
	// jobs, the events, the revision saved, COMMIT: the same for a turn's
	// hundred placements as for one (TestPlacementsAreBatched).
	count("assignment", budgets[1], func() error {
		busy := c.assign(ctx, []scheduler.Assignment{{Job: key("ws", j.Name), Nodes: []string{"n1"}}},
			map[string]*api.Compute{key("ws", "cpu"): cp}, now)
		if busy["n1"] == "" {
			t.Errorf("job %s not assigned to node n1", j.Name)
		}
		return nil
	})
	if minted != 1 {
		t.Errorf("identity token minted %d times, want once", minted)
	}
	zero := 0
	// On SQLite: BEGIN, the job, the revision, the node freed, the job,
	// its Running and Completed events, the revision saved, COMMIT.
	count("report", budgets[2], func() error {
		return svc.ReportStatus(ctx, "n1", api.AssignmentStatus{ID: service.AssignmentID("ws", j.Name, 1),
			Status: api.JobCompleted, Started: true, ExitCode: &zero})
	})
	err := st.View(ctx, func(tx store.Tx) error {
		got, err := tx.GetJob(ctx, "ws", j.Name)
		if err != nil {
			return err
		}
		n, err := tx.GetNode(ctx, "n1")
		if err != nil {
			return err
		}
		if got.Status != api.JobCompleted || n.State != api.NodeIdle || n.Job != "" {
			t.Errorf("after the report: job %s, node %s running %q; want Completed, and the node idle", got.Status, n.State, n.Job)
		}
		es, err := tx.ListEvents(ctx, "ws", "job/"+j.Name, 0, 0)
		var kinds []string
		for _, e := range es {
			kinds = append(kinds, e.Kind)
		}
		if want := []string{"Queued", "Assigned", "Running", "Completed"}; !slices.Equal(kinds, want) {
			t.Errorf("job events: %q, want %q", kinds, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
