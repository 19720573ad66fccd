package controller

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/store/postgres"
)

// TestStatusWritesWithoutReading checks the write of the computes' node
// counts: a compute the turn read is written over the turn's copy, without
// a read of its own (two statements each on SQLite: the etag's check and
// the write; a read added back makes three), and a compute a user updated
// after the turn's read keeps the update, with the counts written over it.
func TestStatusWritesWithoutReading(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { statusWritesWithoutReading(t, openSQLite(t).(counted), true) })
	t.Run("postgres", func(t *testing.T) { statusWritesWithoutReading(t, openPostgres(t), false) })
}

// statusWritesWithoutReading runs TestStatusWritesWithoutReading on st; the
// statement budget is SQLite's (budget).
func statusWritesWithoutReading(t *testing.T, st counted, budget bool) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const computes = 4
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		for i := range computes {
			name := fmt.Sprintf("c%d", i)
			if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: name, Location: "local", Size: "Standard_DS3_v2",
				MinInstances: 2, MaxInstances: 2, ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
				return err
			}
			for n := range 2 {
				if err := tx.PutNode(ctx, &api.Node{ID: fmt.Sprintf("%s-n%d", name, n), Workspace: "ws", Compute: name,
					State: api.NodeIdle, StateSince: now}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	c := New(Options{Store: st, Catalog: catalog.Default(), Config: config.Default(), Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		Changes: NewBroadcast()})
	s, err := c.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.status(ctx, s, autoscaler.Result{})
	if err != nil {
		t.Fatal(err)
	}
	// A user updates c0 after the turn's read.
	mustUpdate(t, st, func(tx store.Tx) error {
		cp, err := tx.GetCompute(ctx, "ws", "c0")
		if err != nil {
			return err
		}
		cp.Description = "updated meanwhile"
		return tx.PutCompute(ctx, cp, "")
	})
	n0 := st.Statements()
	if err := c.commit(ctx, w); err != nil {
		t.Fatal(err)
	}
	// BEGIN, the revision, the saved revision, COMMIT; two statements per
	// compute read by the turn; c0's failed check, its read, and its write's
	// two. (Reading each compute first made 16.)
	// (The computes' counts were never written: every one changes.)
	if got, most := st.Statements()-n0, int64(4+2*(computes-1)+4); budget && got > most {
		t.Errorf("the status write of %d computes ran %d statements, more than its budget of %d", computes, got, most)
	}
	err = st.View(ctx, func(tx store.Tx) error {
		cps, err := tx.ListComputes(ctx, "ws")
		for _, cp := range cps {
			if want := (api.NodeStateCounts{Idle: 2}); cp.NodeStateCounts != want {
				t.Errorf("compute %s: node counts %+v, want %+v", cp.Name, cp.NodeStateCounts, want)
			}
			if cp.Name == "c0" && cp.Description != "updated meanwhile" {
				t.Errorf("compute c0: the user's update since the turn's read is lost (description %q)", cp.Description)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOneWriteATurn checks that a turn whose plan creates and removes no
// node writes its placements, the pending reasons and the computes' status
// in one transaction (it waited for the store's writer twice), and that
// the status counts the nodes it placed jobs on as running.
func TestOneWriteATurn(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { oneWriteATurn(t, openSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { oneWriteATurn(t, openPostgres(t)) })
}

func oneWriteATurn(t *testing.T, st store.Store) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: "cpu", Location: "local", Size: "Standard_DS3_v2",
			MinInstances: 2, MaxInstances: 2, ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
			return err
		}
		for i := range 2 {
			if err := tx.PutNode(ctx, &api.Node{ID: fmt.Sprintf("n%d", i), Workspace: "ws", Compute: "cpu", Location: "local",
				State: api.NodeIdle, StateSince: now, LastHeartbeat: now}); err != nil {
				return err
			}
		}
		for i := range 3 {
			if err := tx.PutJob(ctx, &api.Job{Workspace: "ws", Name: fmt.Sprintf("j%d", i), Type: api.JobTypeCommand, Command: "true",
				Compute: "cpu", Status: api.JobQueued, CreatedOn: now.Add(time.Duration(i) * time.Second)}, ""); err != nil {
				return err
			}
		}
		return nil
	})
	cfg := config.Default()
	cfg.SampleInterval = 0 // no sample written beside the turn
	c := New(Options{Store: st, Catalog: catalog.Default(), Config: cfg, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		Changes: NewBroadcast()})
	w0 := c.store.(*writeCounter).n.Load()
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.store.(*writeCounter).n.Load() - w0; n != 1 {
		t.Errorf("the turn ran %d write transactions, want 1", n)
	}
	err := st.View(ctx, func(tx store.Tx) error {
		js, err := tx.ListJobs(ctx, store.JobFilter{Workspace: "ws"})
		for _, j := range js {
			if want := map[string]string{"j0": api.JobPreparing, "j1": api.JobPreparing, "j2": api.JobQueued}[j.Name]; j.Status != want {
				t.Errorf("job %s is %s, want %s", j.Name, j.Status, want)
			}
			if j.Name == "j2" && j.PendingReason == "" {
				t.Errorf("job %s has no pending reason", j.Name)
			}
		}
		if err != nil {
			return err
		}
		cp, err := tx.GetCompute(ctx, "ws", "cpu")
		if err != nil {
			return err
		}
		if want := (api.NodeStateCounts{Running: 2}); cp.NodeStateCounts != want || cp.CurrentNodeCount != 2 {
			t.Errorf("compute status: %d nodes, %+v; want 2, %+v", cp.CurrentNodeCount, cp.NodeStateCounts, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openPostgres opens a store on a PostgreSQL server of the test's own.
func openPostgres(t *testing.T) counted {
	st, err := postgres.Open(t.Context(), pgtest.Start(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
