package controller

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// TestLivenessAllowsForTheWritePeriod: heartbeats reach the store at least
// every service.BeatWritePeriod, so a controller that did not receive a
// node's heartbeats (a leader whose replica does not, or one after a
// failover) judges it silent once its last_seen is unusable_after plus
// that period old, not before; one given the receiving service's judgement
// (Options.Silent) judges by the last heartbeat that service answered.
func TestLivenessAllowsForTheWritePeriod(t *testing.T) {
	ctx := context.Background()
	cfg := config.Server{HeartbeatInterval: time.Second, UnusableAfter: 10 * time.Second, ProvisionTimeout: time.Hour}
	w := service.BeatWritePeriod(cfg) // 8 s
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		receive bool // the controller's replica received the heartbeats
		alive   time.Duration
		silent  time.Duration
	}{
		// last_seen is 3 s older than the last heartbeat: judged by it
		// alone, the node would be silent at unusable_after.
		{"another replica's nodes", false, cfg.UnusableAfter, cfg.UnusableAfter + w},
		{"this replica's nodes", true, cfg.UnusableAfter, cfg.UnusableAfter + time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := openSQLite(t)
			now := t0
			clock := func() time.Time { return now }
			svc := &service.Service{Store: st, Config: cfg, Now: clock}
			o := Options{Store: st, Config: cfg, Hub: NewHub(), Log: slog.New(slog.DiscardHandler), Now: clock}
			if c.receive {
				o.Silent = svc.Silent
			}
			ctrl := New(o)
			if err := st.Update(ctx, func(tx store.Tx) error {
				return tx.PutNode(ctx, &api.Node{ID: "n", Workspace: "ws", Compute: "cpu", State: api.NodeIdle, CreatedOn: t0, LastHeartbeat: t0})
			}); err != nil {
				t.Fatal(err)
			}
			// Heartbeats every second for 20 s, written at 1, 9 and 17 s:
			// the last three are answered from memory.
			for i := 1; i <= 20; i++ {
				now = t0.Add(time.Duration(i) * time.Second)
				if _, err := svc.Heartbeat(ctx, "n", api.AgentHeartbeat{}); err != nil {
					t.Fatal(err)
				}
			}
			last := now
			state := func(after time.Duration) string {
				t.Helper()
				now = last.Add(after)
				s, err := ctrl.load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := ctrl.liveness(ctx, s, now); err != nil {
					t.Fatal(err)
				}
				var n *api.Node
				if err := st.View(ctx, func(tx store.Tx) (err error) { n, err = tx.GetNode(ctx, "n"); return err }); err != nil {
					t.Fatal(err)
				}
				return n.State
			}
			ctrl.started = t0
			if seen := last.Add(-3 * time.Second); !ctrlSeen(t, st).Equal(seen) {
				t.Fatalf("last_seen %s, want %s", ctrlSeen(t, st), seen)
			}
			if got := state(c.alive); got != api.NodeIdle {
				t.Errorf("%s after the last heartbeat: %s, want idle", c.alive, got)
			}
			if got := state(c.silent); got != api.NodeUnusable {
				t.Errorf("%s after the last heartbeat: %s, want unusable", c.silent, got)
			}
		})
	}
}

// TestUnusableNodeIsRecheckedAtOnce: a node the controller makes unusable
// (or removes) while its agent still heartbeats is told at its next
// heartbeat, which is written and reconciled with the store, not answered
// from the replica's memory until the write period runs out.
func TestUnusableNodeIsRecheckedAtOnce(t *testing.T) {
	ctx := context.Background()
	cfg := config.Server{HeartbeatInterval: time.Second, UnusableAfter: 10 * time.Second, ProvisionTimeout: time.Hour}
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	st := openSQLite(t)
	now := t0
	clock := func() time.Time { return now }
	svc := &service.Service{Store: st, Config: cfg, Now: clock}
	hub := NewHub()
	hub.Sent = svc.Recheck // as the server wires it
	ctrl := New(Options{Store: st, Config: cfg, Hub: hub, Log: slog.New(slog.DiscardHandler), Now: clock})
	n := api.Node{ID: "n", Workspace: "ws", Compute: "cpu", State: api.NodeIdle, CreatedOn: t0, LastHeartbeat: t0}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.PutNode(ctx, &n) }); err != nil {
		t.Fatal(err)
	}
	beat := func(s int) {
		t.Helper()
		now = t0.Add(time.Duration(s) * time.Second)
		if _, err := svc.Heartbeat(ctx, "n", api.AgentHeartbeat{}); err != nil {
			t.Fatal(err)
		}
	}
	beat(1) // written: the first
	beat(2) // answered from memory
	if seen := ctrlSeen(t, st); !seen.Equal(t0.Add(time.Second)) {
		t.Fatalf("last_seen %s after a quiet heartbeat, want the first one's (%s)", seen, t0.Add(time.Second))
	}
	if err := ctrl.markUnusable(ctx, n, "its disk failed", now); err != nil {
		t.Fatal(err)
	}
	beat(3)
	if seen := ctrlSeen(t, st); !seen.Equal(now) {
		t.Errorf("last_seen %s after the node was made unusable, want the heartbeat at %s written", seen, now)
	}
}

func ctrlSeen(t *testing.T, st store.Store) time.Time {
	t.Helper()
	var n *api.Node
	if err := st.View(context.Background(), func(tx store.Tx) (err error) {
		n, err = tx.GetNode(context.Background(), "n")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n.LastHeartbeat
}

// TestScaleDownSaidOnce: the autoscaler asks every turn to remove an
// unusable node until its provider is done; the compute's events say the
// removal once, not once a turn (a CI log showed five in half a second).
func TestScaleDownSaidOnce(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	ctrl := New(Options{Store: st, Config: config.Server{HeartbeatInterval: time.Second, UnusableAfter: 10 * time.Second},
		Hub: NewHub(), Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	n := api.Node{ID: "n", Workspace: "ws", Compute: "cpu", State: api.NodeUnusable, CreatedOn: now}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.PutNode(ctx, &n) }); err != nil {
		t.Fatal(err)
	}
	ctrl.claim(n.ID) // the provider's delete of the first ask is under way
	for range 3 {
		ctrl.scaleDown(ctx, n, "node is Unusable; removing it so it can be replaced", now)
	}
	ctrl.release(n.ID)
	ctrl.scaleDown(ctx, n, "node is Unusable; removing it so it can be replaced", now)
	var evs []api.Event
	if err := st.View(ctx, func(tx store.Tx) (err error) { evs, err = tx.ListEvents(ctx, "ws", "compute/cpu", 0, 100); return err }); err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Errorf("%d ScaleDown events for one removal asked four times, three while under way; want 1: %v", len(evs), evs)
	}
}
