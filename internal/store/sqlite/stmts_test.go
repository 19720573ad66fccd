package sqlite

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// TestPreparedStatementsSeeNewWrites checks the statement cache: a
// statement is prepared once a transaction has missed it, later
// transactions run it prepared, and a prepared read sees every write
// committed before its transaction (a statement left mid-read would pin an
// old snapshot of the database).
func TestPreparedStatementsSeeNewWrites(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := &api.Job{Workspace: "ws", Name: "j", Compute: "cpu", Status: api.JobQueued}
	for i, status := range []string{api.JobQueued, api.JobRunning, api.JobCompleted, api.JobFailed} {
		j.Status = status
		if err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
				return err
			}
			return tx.PutJob(ctx, j, "")
		}); err != nil {
			t.Fatal(err)
		}
		// Two reads per write, so that the readers' several connections
		// each run the statement prepared.
		for range 2 {
			if err := s.View(ctx, func(tx store.Tx) error {
				got, err := tx.GetJob(ctx, "ws", "j")
				if err != nil {
					return err
				}
				if got.Status != status || got.Etag != j.Etag {
					t.Errorf("write %d: read status %s etag %s, want %s etag %s", i, got.Status, got.Etag, status, j.Etag)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := s.readerStmts.get(`SELECT etag, doc FROM jobs WHERE workspace = ? AND name = ?`); got == nil {
		t.Errorf("GetJob's statement was not kept prepared for readers")
	}
	if got := s.writerStmts.get(`UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`); got == nil {
		t.Errorf("nextRevision's statement was not kept prepared for the writer")
	}
}
