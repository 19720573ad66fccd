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
