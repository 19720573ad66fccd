package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
)

// TestFirstStatementErrorSaidOnce: a transaction's first statement, sent
// with its BEGIN (lazy.go), that fails returns its error once, by Exec and
// by Query: pgx's batch Close returns the same error again.
func TestFirstStatementErrorSaidOnce(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Start(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, first := range map[string]func(x *tx) error{
		"Exec": func(x *tx) error { _, err := x.tx.Exec(ctx, `SELECT 1/0`); return err },
		"Query": func(x *tx) error {
			rows, err := x.tx.Query(ctx, `SELECT 1/0`)
			if err == nil {
				rows.Next()
				rows.Close()
				err = rows.Err()
			}
			return err
		},
	} {
		err := s.Update(ctx, func(x store.Tx) error { return first(x.(*tx)) })
		if err == nil || strings.Count(err.Error(), "SQLSTATE") != 1 {
			t.Errorf("%s: the error is %q, want it once", name, err)
		}
	}
}

// TestSavepointsHeld: a savepoint's statements go with the next statement
// (a batch of submissions, each in its savepoint, costs a round trip per
// statement of its own only); a savepoint whose statement failed is
// rolled back and the next one commits; one whose fn hid a failed
// statement breaks the transaction rather than lose what came before. A
// held write goes with its savepoint's RELEASE (its error is the
// savepoint's), is dropped with its savepoint rolled back, and is
// committed when nothing follows it.
func TestSavepointsHeld(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Start(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	refused := errors.New("refused")
	trips := s.RoundTrips()
	err = s.Update(ctx, func(x store.Tx) error {
		for _, k := range []string{"a", "b", "c"} {
			if err := x.Savepoint(ctx, func() error { return x.PutSetting(ctx, k, "1") }); err != nil {
				return err
			}
		}
		err := x.Savepoint(ctx, func() error {
			_, err := x.(*tx).tx.Exec(ctx, `SELECT 1/0`)
			return err
		})
		if err == nil || errors.Is(err, store.ErrTxBroken) {
			t.Errorf("a savepoint's failed statement: %v, want its own error", err)
		}
		if err := x.Savepoint(ctx, func() error { x.PutSetting(ctx, "d", "1"); return refused }); !errors.Is(err, refused) {
			t.Errorf("a refused savepoint: %v, want %v", err, refused)
		}
		// A held write goes with the RELEASE, or not at all when its
		// savepoint is rolled back.
		hold := func(k string) {
			x.(*tx).tx.holdWrite("putting setting", `INSERT INTO settings (key, value) VALUES ($1, '1')`, k)
		}
		if err := x.Savepoint(ctx, func() error { hold("g"); return refused }); !errors.Is(err, refused) {
			t.Errorf("a refused savepoint with a held write: %v, want %v", err, refused)
		}
		if err := x.Savepoint(ctx, func() error { hold("h"); return nil }); err != nil {
			return err
		}
		return x.Savepoint(ctx, func() error { return x.PutSetting(ctx, "e", "1") })
	})
	if err != nil {
		t.Fatal(err)
	}
	// BEGIN with the first, one each, COMMIT: no savepoint's own but the
	// rollback after the failed statement (PostgreSQL prepares nothing
	// else until it has run), and the release of the held write.
	if n := s.RoundTrips() - trips; n != 9 {
		t.Errorf("eight savepoints took %d round trips, want 9", n)
	}
	err = s.View(ctx, func(x store.Tx) error {
		for k, want := range map[string]bool{"a": true, "b": true, "c": true, "d": false, "e": true, "g": false, "h": true} {
			if _, err := x.GetSetting(ctx, k); (err == nil) != want {
				t.Errorf("setting %s: %v, want it stored: %v", k, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var before int
	err = s.Update(ctx, func(x store.Tx) error {
		if err := x.Savepoint(ctx, func() error { return x.PutSetting(ctx, "f", "1") }); err != nil {
			return err
		}
		err := x.Savepoint(ctx, func() error {
			x.(*tx).tx.Exec(ctx, `SELECT 1/0`) // hidden
			return nil
		})
		before++
		return err
	})
	if !errors.Is(err, store.ErrTxBroken) || before != 1 {
		t.Errorf("a savepoint that hid its failed statement: %v, want %v", err, store.ErrTxBroken)
	}
	// A held write that fails fails its savepoint, not a later one.
	err = s.Update(ctx, func(x store.Tx) error {
		err := x.Savepoint(ctx, func() error {
			x.(*tx).tx.holdWrite("putting setting", `INSERT INTO settings (key, value) VALUES ($1, 1/0)`, "i")
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "putting setting") {
			t.Errorf("a savepoint whose held write failed: %v; want an error naming the write", err)
		}
		return err
	})
	if err == nil {
		t.Errorf("a transaction whose held write failed committed")
	}
	// Held writes alone are committed.
	err = s.Update(ctx, func(x store.Tx) error {
		x.(*tx).tx.holdWrite("putting setting", `INSERT INTO settings (key, value) VALUES ($1, '1')`, "j")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(x store.Tx) error {
		if _, err := x.GetSetting(ctx, "f"); !store.IsNotFound(err) {
			t.Errorf("setting f of the broken transaction: %v, want it not stored", err)
		}
		if _, err := x.GetSetting(ctx, "j"); err != nil {
			t.Errorf("setting j, a held write alone: %v, want it stored", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestComputeReadOnce: a transaction reads a compute once however often it
// asks (a batch of submissions to one compute), in one round trip.
func TestComputeReadOnce(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Start(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Update(ctx, func(x store.Tx) error {
		if err := x.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		return x.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: "cpu", MaxInstances: 2}, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	trips := s.RoundTrips()
	err = s.View(ctx, func(x store.Tx) error {
		for range 3 {
			if _, err := x.GetCompute(ctx, "ws", "cpu"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.RoundTrips() - trips; n != 2 {
		t.Errorf("three reads of a compute took %d round trips, want 2 (with BEGIN, and COMMIT)", n)
	}
}
