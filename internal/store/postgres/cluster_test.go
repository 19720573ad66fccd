package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/store/postgres"
)

func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), url, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replica campaigns for leadership in the background, as a server does.
type replica struct {
	name    string
	leading atomic.Bool
	terms   atomic.Int32
	stop    context.CancelFunc
	done    chan struct{}
}

func campaign(t *testing.T, s *postgres.Store, name string) *replica {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = s.Lead(ctx, name, func(lead context.Context) {
			r.terms.Add(1)
			r.leading.Store(true)
			<-lead.Done()
			r.leading.Store(false)
		})
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func TestExactlyOneLeaderAndTakeover(t *testing.T) {
	url := pgtest.Start(t)
	a, b := open(t, url), open(t, url)
	ra := campaign(t, a, "a")
	waitFor(t, "a to lead", ra.leading.Load)
	rb := campaign(t, b, "b")
	// b must not lead while a does.
	for range 20 {
		if rb.leading.Load() {
			t.Fatal("two replicas lead at once")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := b.Leader(t.Context()); err != nil || got != "a" {
		t.Fatalf("Leader() = %q, %v; want a", got, err)
	}
	// a stops (its session ends): b takes over.
	start := time.Now()
	ra.stop()
	<-ra.done
	waitFor(t, "b to lead", rb.leading.Load)
	t.Logf("takeover after %v", time.Since(start))
	if got, err := a.Leader(t.Context()); err != nil || got != "b" {
		t.Fatalf("Leader() = %q, %v; want b", got, err)
	}
}

func TestLeaderLosesDatabase(t *testing.T) {
	pg := pgtest.NewCluster(t)
	url := pg.Database(t)
	a := open(t, url)
	ra := campaign(t, a, "a")
	waitFor(t, "a to lead", ra.leading.Load)
	pg.Restart(t, 500*time.Millisecond)
	// The session holding the lock ended with the database: a noticed,
	// stopped leading, and leads again once the database is back.
	waitFor(t, "a to lead a second term", func() bool { return ra.terms.Load() >= 2 && ra.leading.Load() })
	// The pool's idle connections died too; a transaction still works.
	err := a.View(t.Context(), func(tx store.Tx) error {
		_, err := tx.GetWorkspace(t.Context(), "default")
		if store.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatalf("a transaction after the restart: %v", err)
	}
}

func TestStoreDownIsUnavailable(t *testing.T) {
	pg := pgtest.NewCluster(t)
	s := open(t, pg.Database(t))
	pg.Stop(t)
	// While the database is down, reads and writes fail with ErrUnavailable
	// (the API answers 503, clients retry), never anything that looks like
	// a bug.
	for i := range 3 {
		err := s.Update(t.Context(), func(tx store.Tx) error {
			return tx.PutWorkspace(t.Context(), &api.Workspace{Name: "w"})
		})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Update %d while the database is down: %v; want ErrUnavailable", i, err)
		}
	}
	pg.Start(t)
	if err := s.Update(t.Context(), func(tx store.Tx) error {
		return tx.PutWorkspace(t.Context(), &api.Workspace{Name: "w2"})
	}); err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
}

func TestPublishListen(t *testing.T) {
	url := pgtest.Start(t)
	a, b := open(t, url), open(t, url)
	got := make(chan [2]string, 16)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		_ = b.Listen(ctx, []string{"tide_changes", "tide_agents"}, func(topic, payload string) {
			got <- [2]string{topic, payload}
		})
	}()
	if m := <-got; m != [2]string{"", ""} {
		t.Fatalf("first message %q, want the (re)connection marker", m)
	}
	if err := a.Publish(t.Context(), "tide_agents", "node-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != [2]string{"tide_agents", "node-1"} {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
}
