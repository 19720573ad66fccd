package controller

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// TestLoadFollowsChanges checks that a turn's snapshot, built from the
// store's change feed after the first turn, holds exactly the unfinished
// jobs, the queued ones in its queue and the others in creation order: new
// ones join, finished ones leave, changed ones are the stored version, and
// many jobs finishing does not reorder the rest.
func TestLoadFollowsChanges(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	c := New(Options{Store: st, Log: slog.New(slog.DiscardHandler)})
	put := func(js ...*api.Job) {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error {
			if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
				return err
			}
			for _, j := range js {
				if err := tx.PutJob(ctx, j, ""); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	job := func(name, status string) *api.Job {
		return &api.Job{Workspace: "ws", Name: name, Type: api.JobTypeCommand, Compute: "cpu", Status: status}
	}
	check := func(what string, want ...string) *snapshot {
		t.Helper()
		s, err := c.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range s.jobs {
			got = append(got, j.Name+":"+j.Status)
		}
		for j := range s.queue.q.All() {
			got = append(got, jobName(j.Key)+":queue")
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: snapshot jobs = %v, want %v", what, got, want)
		}
		return s
	}
	a, b, done := job("a", api.JobQueued), job("b", api.JobRunning), job("done", api.JobCompleted)
	put(a, b, done)
	check("first load", "b:Running", "a:queue")
	if c.cursor == "" {
		t.Fatal("no cursor after the first load")
	}

	b.Status = api.JobCompleted
	a.PendingReason = "waiting"
	put(a, b, job("c", api.JobQueued))
	s := check("after a change", "a:queue", "c:queue")
	if r := s.queue.reasons["ws/a"]; r != "waiting" {
		t.Errorf("job a's pending reason = %q, want the stored %q", r, "waiting")
	}
	check("nothing written", "a:queue", "c:queue")

	// A finished job that comes back (requeued) is listed once, in its
	// place; a job that leaves the queue leaves it.
	b.Status = api.JobQueued
	put(b)
	check("b requeued", "a:queue", "b:queue", "c:queue")
	b.Status = api.JobRunning
	put(b)
	check("b running", "b:Running", "a:queue", "c:queue")
	b.Status = api.JobCompleted
	put(b)
	check("b finished again", "a:queue", "c:queue")

	// Enough jobs come and go that the order is compacted.
	var many []*api.Job
	for i := range 100 {
		many = append(many, job("m"+string(rune('a'+i/26))+string(rune('a'+i%26)), api.JobQueued))
	}
	put(many...)
	for _, j := range many {
		j.Status = api.JobRunning
	}
	put(many...)
	for _, j := range many {
		j.Status = api.JobCanceled
	}
	put(many...)
	put(job("d", api.JobQueued))
	check("after 100 jobs came and went", "a:queue", "c:queue", "d:queue")
	if len(c.order) > 2*len(c.jobs)+64 {
		t.Errorf("order holds %d keys for %d jobs: finished jobs were not dropped", len(c.order), len(c.jobs))
	}
}

// openSQLite opens a store in a temporary folder, closed when the test ends.
func openSQLite(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// mustUpdate runs fn in a write transaction of st, failing the test on error.
func mustUpdate(t testing.TB, st store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := st.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}
