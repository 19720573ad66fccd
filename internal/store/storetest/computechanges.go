package storetest

import (
	"slices"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// changedComputes reads the computes written after cursor: their keys
// (workspace/name, in the order listed), the total and the next cursor.
func changedComputes(t *testing.T, s store.Store, cursor string) ([]string, int, string) {
	t.Helper()
	var keys []string
	var total int
	var next string
	view(t, s, func(tx store.Tx) error {
		cs, n, c, err := tx.ChangedComputes(t.Context(), cursor)
		if err != nil {
			t.Fatalf("ChangedComputes(%q): %v", cursor, err)
		}
		for _, x := range cs {
			keys = append(keys, x.Workspace+"/"+x.Name)
		}
		total, next = n, c
		return nil
	})
	return keys, total, next
}

// testChangedComputes checks the compute feed the controller follows: a
// PutCompute after the cursor is listed (in ListComputes' order: name,
// then workspace) with its etag, a deletion shows in the total, and a
// write in flight is listed by the next read.
func testChangedComputes(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	put := func(cs ...*api.Compute) {
		update(t, s, func(tx store.Tx) error {
			for _, c := range cs {
				if err := tx.PutWorkspace(ctx, &api.Workspace{Name: c.Workspace}); err != nil {
					return err
				}
				if err := tx.PutCompute(ctx, c, ""); err != nil {
					return err
				}
			}
			return nil
		})
	}
	compute := func(ws, name string) *api.Compute {
		return &api.Compute{Workspace: ws, Name: name, Size: "Standard_DS3_v2", MaxInstances: 2}
	}
	a, b, c := compute("w2", "a"), compute("w1", "b"), compute("w1", "a")
	put(a, b)
	var cursor string
	view(t, s, func(tx store.Tx) (err error) {
		cursor, err = tx.ComputeCursor(ctx)
		return err
	})
	b.MaxInstances = 3
	put(b, c)
	keys, total, next := changedComputes(t, s, cursor)
	// PostgreSQL may list w2/a again (the cursor is the oldest transaction
	// running); w1/a and w1/b must be there, in ListComputes' order.
	exact := slices.Equal(keys, []string{"w1/a", "w1/b"})
	if !exact && !slices.Equal(keys, []string{"w1/a", "w2/a", "w1/b"}) || total != 3 {
		t.Errorf("ChangedComputes after writing w1/b and w1/a = %v of %d, want [w1/a w1/b] (or [w1/a w2/a w1/b]) of 3", keys, total)
	}
	view(t, s, func(tx store.Tx) error {
		cs, _, _, err := tx.ChangedComputes(ctx, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range cs {
			if x.Name == "b" && (x.MaxInstances != 3 || x.Etag != b.Etag) {
				t.Errorf("ChangedComputes listed w1/b with max_instances %d, etag %q; want the written 3, etag %q", x.MaxInstances, x.Etag, b.Etag)
			}
		}
		return nil
	})
	if keys, _, next = changedComputes(t, s, next); exact && len(keys) > 0 {
		t.Errorf("ChangedComputes with no write = %v, want none", keys)
	}

	// A deletion lists nothing; the total says it.
	update(t, s, func(tx store.Tx) error { return tx.DeleteCompute(ctx, "w2", "a") })
	keys, total, next = changedComputes(t, s, next)
	if slices.Contains(keys, "w2/a") || total != 2 {
		t.Errorf("ChangedComputes after deleting w2/a = %v of %d, want no w2/a, of 2", keys, total)
	}

	// A write in flight while the feed is read is listed by the next read.
	d := compute("w1", "d")
	commit := heldWrite(t, s, func(tx store.Tx) error { return tx.PutCompute(ctx, d, "") })
	keys, _, next = changedComputes(t, s, next)
	if slices.Contains(keys, "w1/d") {
		t.Fatalf("ChangedComputes listed w1/d before its transaction committed")
	}
	commit()
	if keys, total, _ = changedComputes(t, s, next); !slices.Contains(keys, "w1/d") || total != 3 {
		t.Errorf("ChangedComputes after w1/d committed = %v of %d, want w1/d, of 3", keys, total)
	}
	view(t, s, func(tx store.Tx) error {
		if _, _, _, err := tx.ChangedComputes(ctx, "not a cursor"); err == nil {
			t.Errorf("ChangedComputes accepted the cursor %q", "not a cursor")
		}
		return nil
	})
}
