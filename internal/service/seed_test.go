package service

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// seedStore opens a SQLite store, closed when the test ends, holding the
// workspace "default" with compute cp, nodes and job.
func seedStore(t *testing.T, cp *api.Compute, nodes []*api.Node, job *api.Job) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return err
		}
		for _, n := range nodes {
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		return tx.PutJob(ctx, job, "")
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// seedRank seeds a store whose node "n" of compute "c" holds the one rank
// of attempt 1 of job name, in the job status and rank status given; it
// returns the store and the rank's assignment ID.
func seedRank(t *testing.T, name, jobStatus, rankStatus string) (store.Store, string) {
	t.Helper()
	id := AssignmentID("default", name, 1)
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 1},
		[]*api.Node{{ID: "n", Workspace: "default", Compute: "c", State: api.NodeRunning, Job: id}},
		&api.Job{Workspace: "default", Name: name, Type: "command", Command: "true", Compute: "c",
			Status: jobStatus, Attempt: 1, Ranks: []api.JobRank{{Node: "n", Status: rankStatus}}})
	return st, id
}

// seedCPU is a store holding compute cpu (up to 4 nodes) and one
// completed job.
func seedCPU(t *testing.T) store.Store {
	t.Helper()
	return seedStore(t, &api.Compute{Name: "cpu", Workspace: "default", Type: "amlcompute", Size: "Standard_DS3_v2", MaxInstances: 4},
		nil, &api.Job{Name: "first-job", Workspace: "default", Compute: "cpu", Status: api.JobCompleted})
}

// wantStored checks that job name of workspace default is stored, or not.
func wantStored(t *testing.T, st store.Store, name string, want bool) {
	t.Helper()
	ctx := context.Background()
	err := st.View(ctx, func(tx store.Tx) error { _, err := tx.GetJob(ctx, "default", name); return err })
	if stored := err == nil; stored != want {
		t.Errorf("job %s stored: %v (%v), want %v", name, stored, err, want)
	}
}
