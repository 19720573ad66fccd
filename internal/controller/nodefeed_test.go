package controller

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// TestLoadFollowsNodeChanges checks that a turn's nodes, kept between turns
// and brought up to date from the store's node feed, are the stored nodes
// in id order: new ones join, changed ones are the stored version, deleted
// ones leave; and that liveness still sees a node go silent although its
// heartbeats are no change the feed lists.
func TestLoadFollowsNodeChanges(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	c := New(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	c.cfg.UnusableAfter, c.cfg.ProvisionTimeout = time.Minute, time.Hour
	put := func(ns ...*api.Node) {
		t.Helper()
		mustUpdate(t, st, func(tx store.Tx) error {
			for i := range ns {
				if err := tx.PutNode(ctx, ns[i]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	node := func(id, state string) *api.Node {
		return &api.Node{ID: id, Workspace: "ws", Compute: "cpu", State: state, LastHeartbeat: now, CreatedOn: now}
	}
	check := func(what string, want ...string) *snapshot {
		t.Helper()
		s, err := c.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range s.nodes {
			got = append(got, n.ID+":"+n.State)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: snapshot nodes = %v, want %v", what, got, want)
		}
		return s
	}
	b, a := node("b", api.NodeIdle), node("a", api.NodeIdle)
	put(b, a)
	check("first load", "a:idle", "b:idle")
	if c.nodes.cursor == "" {
		t.Fatal("no node cursor after the first load")
	}
	a.State, a.Job = api.NodeRunning, "ws/j/1"
	put(a, node("c", api.NodePreparing))
	check("after a change and a new node", "a:running", "b:idle", "c:preparing")
	check("nothing written", "a:running", "b:idle", "c:preparing")
	mustUpdate(t, st, func(tx store.Tx) error { return tx.DeleteNode(ctx, "b") })
	put(node("0", api.NodeIdle)) // one more, one less: as many as before
	check("after a deletion and a new node", "0:idle", "a:running", "c:preparing")

	// Two minutes on, only a has sent a heartbeat: 0 goes silent (c is
	// preparing, which liveness judges by its creation).
	c.started = now
	now = now.Add(2 * time.Minute)
	mustUpdate(t, st, func(tx store.Tx) error { return tx.PutNodeBeat(ctx, "a", store.NodeBeat{LastHeartbeat: now}) })
	s := check("after a heartbeat", "0:idle", "a:running", "c:preparing")
	if err := c.liveness(ctx, s, now); err != nil {
		t.Fatal(err)
	}
	check("after liveness", "0:unusable", "a:running", "c:preparing")
}
