package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/api"
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

// TestOneWriterPerReplica checks that a replica's write transactions run
// one at a time, as SQLite's do: concurrent serializable transactions that
// read and write nearby rows (an agent's report and a turn's placements)
// made PostgreSQL abort and retry them, 0.4 times per dispatched job.
func TestOneWriterPerReplica(t *testing.T) {
	s, err := newDB(t)(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	var running, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 20 {
				err := s.Update(ctx, func(tx store.Tx) error {
					n := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					node := &api.Node{ID: fmt.Sprintf("n%d", i), Workspace: "default", Compute: "c", State: api.NodeIdle}
					if _, err := tx.GetNode(ctx, node.ID); err != nil && !store.IsNotFound(err) {
						return err
					}
					time.Sleep(time.Millisecond)
					return tx.PutNode(ctx, node)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("%d write transactions of one store ran at once, want 1", m)
	}
}
