package sqlite_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

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
