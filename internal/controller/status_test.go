package controller

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
)

// TestStatusWritesWithoutReading checks the write of the computes' node
// counts: a compute the turn read is written over the turn's copy, without
// a read of its own (two statements each on SQLite: the etag's check and
// the write; a read added back makes three), and a compute a user updated
// after the turn's read keeps the update, with the counts written over it.
func TestStatusWritesWithoutReading(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t).(counted)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const computes = 4
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		for i := range computes {
			name := fmt.Sprintf("c%d", i)
			if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: name, Location: "local", Size: "Standard_DS3_v2",
				MinInstances: 2, MaxInstances: 2, ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
				return err
			}
			for n := range 2 {
				if err := tx.PutNode(ctx, &api.Node{ID: fmt.Sprintf("%s-n%d", name, n), Workspace: "ws", Compute: name,
					State: api.NodeIdle, StateSince: now}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	c := New(Options{Store: st, Catalog: catalog.Default(), Config: config.Default(), Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		Changes: NewBroadcast()})
	s, err := c.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.status(ctx, s, autoscaler.Result{})
	if err != nil {
		t.Fatal(err)
	}
	// A user updates c0 after the turn's read.
	mustUpdate(t, st, func(tx store.Tx) error {
		cp, err := tx.GetCompute(ctx, "ws", "c0")
		if err != nil {
			return err
		}
		cp.Description = "updated meanwhile"
		return tx.PutCompute(ctx, cp, "")
	})
	n0 := st.Statements()
	if err := c.commit(ctx, w); err != nil {
		t.Fatal(err)
	}
	// BEGIN, the revision, the saved revision, COMMIT; two statements per
	// compute read by the turn; c0's failed check, its read, and its write's
	// two. (Reading each compute first made 16.)
	// (The computes' counts were never written: every one changes.)
	if got, budget := st.Statements()-n0, int64(4+2*(computes-1)+4); got > budget {
		t.Errorf("the status write of %d computes ran %d statements, more than its budget of %d", computes, got, budget)
	}
	err = st.View(ctx, func(tx store.Tx) error {
		cps, err := tx.ListComputes(ctx, "ws")
		for _, cp := range cps {
			if want := (api.NodeStateCounts{Idle: 2}); cp.NodeStateCounts != want {
				t.Errorf("compute %s: node counts %+v, want %+v", cp.Name, cp.NodeStateCounts, want)
			}
			if cp.Name == "c0" && cp.Description != "updated meanwhile" {
				t.Errorf("compute c0: the user's update since the turn's read is lost (description %q)", cp.Description)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
