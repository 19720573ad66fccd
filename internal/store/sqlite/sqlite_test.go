package sqlite_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
	"github.com/tideml/tide/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newDB returns an opener for a new database file in the test's temp dir.
func newDB(t *testing.T) storetest.Opener {
	path := filepath.Join(t.TempDir(), "tide.db")
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	return func(ctx context.Context) (store.Store, error) {
		return sqlite.Open(ctx, path, log)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, newDB)
}

func TestMigrationsRecorded(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tide.db")
	for range 2 {
		s, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
}

func TestBadPath(t *testing.T) {
	tests := []struct{ name, path string }{
		{"query", filepath.Join(t.TempDir(), "a?b.db")},
		{"missing dir", filepath.Join(t.TempDir(), "no", "such", "dir", "tide.db")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sqlite.Open(t.Context(), tt.path, slog.New(slog.DiscardHandler))
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tt.path)
			}
		})
	}
}

func openBench(b *testing.B) store.Store {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkPutJob(b *testing.B) { storetest.BenchPutJob(b, openBench(b)) }

func BenchmarkUpdate(b *testing.B) { storetest.BenchUpdate(b, openBench(b)) }

// TestPriorityMigration opens a database as it was before migration 0005
// (jobs without a priority column) holding queued jobs of each kind of
// priority, and checks that opening it with this tide fills the column from
// the jobs' documents.
func TestPriorityMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"none": api.DefaultPriority, "low": 100, "high": 300, "n750": 750}
	err = s.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		for name, p := range map[string]string{"none": "", "low": "low", "high": "high", "n750": "750"} {
			j := &api.Job{Workspace: "ws", Name: name, Type: "command", Command: "true", Compute: "c", Status: api.JobQueued}
			if p != "" {
				j.QueueSettings = &api.QueueSettings{Priority: p}
			}
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Back to schema version 4 (but for later migrations: the index on
	// priority goes first, so that the column can).
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP INDEX jobs_queue_order`, `ALTER TABLE jobs DROP COLUMN priority`, `DELETE FROM schema_migrations WHERE version = 5`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err = sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(ctx, func(tx store.Tx) error {
		vs, err := tx.JobVersions(ctx, store.JobFilter{Workspace: "ws"})
		if err != nil {
			return err
		}
		if len(vs) != len(want) {
			t.Errorf("got %d jobs, want %d", len(vs), len(want))
		}
		for _, v := range vs {
			if v.Priority != want[v.Name] {
				t.Errorf("job %s: priority %d after the migration, want %d", v.Name, v.Priority, want[v.Name])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An event's seq follows its resource's last event, those an earlier tide
// numbered with a counter included, and no counter is written for it: one
// statement per event.
func TestEventSeqFollowsTheLastEvent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// As an earlier tide left them: two events and their counter.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO events (workspace, resource, seq, time, kind, message) VALUES ('ws', 'job/j', 1, '2026-01-01T00:00:00Z', 'Queued', ''), ('ws', 'job/j', 2, '2026-01-01T00:00:01Z', 'Running', '')`,
		`INSERT INTO counters (workspace, scope, last) VALUES ('ws', 'event/job/j', 2)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var seqs []int64
	err = s.Update(ctx, func(tx store.Tx) error {
		for _, r := range []string{"job/j", "job/k", "job/j"} {
			e := &api.Event{Kind: "Completed"}
			if err := tx.AddEvent(ctx, "ws", r, e); err != nil {
				return err
			}
			seqs = append(seqs, e.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{3, 1, 4}; !slices.Equal(seqs, want) {
		t.Errorf("seqs %v, want %v", seqs, want)
	}
	var counters int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM counters WHERE scope LIKE 'event/%' AND NOT (scope = 'event/job/j' AND last = 2)`).Scan(&counters); err != nil {
		t.Fatal(err)
	}
	if counters != 0 {
		t.Errorf("%d event counters written; an event needs none", counters)
	}
}
