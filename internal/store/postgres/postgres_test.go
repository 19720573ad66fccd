package postgres_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/store/postgres"
	"github.com/tideml/tide/internal/store/storetest"
)

// TestMain shares one PostgreSQL cluster between the tests; each test gets
// a database of its own.
func TestMain(m *testing.M) { pgtest.Main(m) }

func newDB(t *testing.T) storetest.Opener {
	url := pgtest.Start(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	return func(ctx context.Context) (store.Store, error) {
		return postgres.Open(ctx, url, log)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, newDB)
}

func TestOpenBadURL(t *testing.T) {
	tests := []struct{ name, url string }{
		{"not a url", "::not a url"},
		{"nothing listening", "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := postgres.Open(t.Context(), tt.url, slog.New(slog.DiscardHandler))
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tt.url)
			}
		})
	}
}

func openBench(b *testing.B) store.Store {
	s, err := postgres.Open(b.Context(), pgtest.Start(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkPutJob(b *testing.B) { storetest.BenchPutJob(b, openBench(b)) }

func BenchmarkUpdate(b *testing.B) { storetest.BenchUpdate(b, openBench(b)) }
