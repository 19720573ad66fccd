package controller

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
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
	mustUpdate(t, st, func(tx store.Tx) error {
		return tx.PutNodeBeats(ctx, map[string]store.NodeBeat{"a": {LastHeartbeat: now}})
	})
	s := check("after a heartbeat", "0:idle", "a:running", "c:preparing")
	if err := c.liveness(ctx, s, now); err != nil {
		t.Fatal(err)
	}
	check("after liveness", "0:unusable", "a:running", "c:preparing")
}

// TestNodeFiguresFollowChanges checks that the nodes and the per-compute
// figures the feed keeps from the changes it reads equal the ones a feed
// built afresh from the store works out, after every step of a random
// sequence of changes: nodes created, their state, error and registration
// changed, heartbeats (no change), deletions.
func TestNodeFiguresFollowChanges(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	states := []string{api.NodePreparing, api.NodeIdle, api.NodeRunning, api.NodeUnusable, api.NodeLeaving, api.NodePreempted}
	var kept nodeFeed
	var ids []string
	read := func(f *nodeFeed) []api.Node {
		t.Helper()
		var ns []api.Node
		if err := st.View(ctx, func(tx store.Tx) (err error) {
			ns, err = f.read(ctx, tx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	for step := range 300 {
		mustUpdate(t, st, func(tx store.Tx) error {
			for range 1 + r.IntN(3) {
				switch op := r.IntN(10); {
				case op < 3 || len(ids) == 0: // a new node
					n := api.Node{ID: fmt.Sprintf("n%03d", r.IntN(1000)), Workspace: "ws", Compute: []string{"a", "b", "c"}[r.IntN(3)],
						State: states[r.IntN(len(states))], CreatedOn: t0.Add(time.Duration(r.IntN(100)) * time.Second)}
					if _, err := tx.GetNode(ctx, n.ID); err == nil {
						continue
					}
					ids = append(ids, n.ID)
					if err := tx.PutNode(ctx, &n); err != nil {
						return err
					}
				case op < 8: // a change of state, error or registration
					n, err := tx.GetNode(ctx, ids[r.IntN(len(ids))])
					if err != nil {
						return err
					}
					switch r.IntN(3) {
					case 0:
						n.State = states[r.IntN(len(states))]
					case 1:
						n.Error = []string{"", "no capacity", "quota"}[r.IntN(3)]
					default:
						n.RegisteredOn = n.CreatedOn.Add(time.Duration(1+r.IntN(60)) * time.Second)
					}
					if err := tx.PutNode(ctx, n); err != nil {
						return err
					}
				case op < 9: // a heartbeat: no change
					if err := tx.PutNodeBeats(ctx, map[string]store.NodeBeat{ids[r.IntN(len(ids))]: {LastHeartbeat: t0}}); err != nil {
						return err
					}
				default:
					i := r.IntN(len(ids))
					if err := tx.DeleteNode(ctx, ids[i]); err != nil {
						return err
					}
					ids = slices.Delete(ids, i, i+1)
				}
			}
			return nil
		})
		got := read(&kept)
		var fresh nodeFeed
		want := read(&fresh)
		if !slices.EqualFunc(got, want, func(a, b api.Node) bool {
			return a.ID == b.ID && a.State == b.State && a.Error == b.Error && a.RegisteredOn.Equal(b.RegisteredOn)
		}) {
			t.Fatalf("step %d: kept nodes differ from the stored ones", step)
		}
		if !reflect.DeepEqual(kept.computes, fresh.computes) {
			for k, cn := range fresh.computes {
				t.Errorf("step %d: compute %s: kept %+v, fresh %+v", step, k, kept.computes[k], cn)
			}
			t.FailNow()
		}
	}

	// The counts are Azure ML's: every node by its state.
	var f nodeFeed
	var ns []api.Node
	for i, s := range []string{api.NodeIdle, api.NodeIdle, api.NodeRunning, api.NodePreparing,
		api.NodeUnusable, api.NodeLeaving, api.NodePreempted, api.NodeRunning, api.NodeRunning} {
		ns = append(ns, api.Node{ID: fmt.Sprint(i), Workspace: "ws", Compute: "x", State: s})
	}
	f.set(ns)
	cn := f.of("ws/x")
	want := api.NodeStateCounts{Idle: 2, Running: 3, Preparing: 1, Unusable: 1, Leaving: 1, Preempted: 1}
	if cn.current != 9 || cn.counts != want || cn.existing != 6 || cn.starting != 1 {
		t.Fatalf("figures = %d, %+v, existing %d, starting %d; want 9, %+v, 6, 1", cn.current, cn.counts, cn.existing, cn.starting, want)
	}
}

// TestStoppingFollowsNodeChanges checks that a running job found alive is
// ended once its node changes under it, each way a node can: it becomes
// unusable, it is given to another job, it is deleted; and that a job
// whose node does not change stays as it is.
func TestStoppingFollowsNodeChanges(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	c := New(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	names := []string{"keep", "unusable", "taken", "deleted"}
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		for _, name := range names {
			j := &api.Job{Workspace: "ws", Name: name, Type: api.JobTypeCommand, Compute: "cpu", Status: api.JobRunning, Attempt: 1,
				Ranks: []api.JobRank{{Node: "n-" + name, Status: api.JobRunning}}}
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
			n := &api.Node{ID: "n-" + name, Workspace: "ws", Compute: "cpu", State: api.NodeRunning, Job: "ws/" + name + "/1", CreatedOn: now}
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		return nil
	})
	turn := func() {
		t.Helper()
		s, err := c.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.stopping(ctx, s, now); err != nil {
			t.Fatal(err)
		}
	}
	status := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		if err := st.View(ctx, func(tx store.Tx) error {
			for _, name := range names {
				j, err := tx.GetJob(ctx, "ws", name)
				if err != nil {
					return err
				}
				out[name] = j.Status
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	turn()
	turn()
	for name, s := range status() {
		if s != api.JobRunning {
			t.Fatalf("job %s is %s before any node changed, want Running", name, s)
		}
	}
	// A turn looks at the jobs and nodes that changed, not at every
	// running job: a kept job made to look lost in memory alone (no
	// write, no node change) is not looked at, so not ended.
	kept := c.jobs["ws/keep"]
	lost := *kept
	lost.Ranks = []api.JobRank{{Node: "n-none", Status: api.JobRunning}}
	c.jobs["ws/keep"] = &lost
	turn()
	if got := status()["keep"]; got != api.JobRunning {
		t.Errorf("a turn with nothing changed looked at a running job (it ended it: %s)", got)
	}
	c.jobs["ws/keep"] = kept
	mustUpdate(t, st, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, "n-unusable")
		if err != nil {
			return err
		}
		n.State = api.NodeUnusable
		if err := tx.PutNode(ctx, n); err != nil {
			return err
		}
		if n, err = tx.GetNode(ctx, "n-taken"); err != nil {
			return err
		}
		n.Job = "ws/other/1"
		return tx.PutNode(ctx, n)
	})
	// An attempt whose node is lost ends (the job is retried: Queued).
	check := func(what string, running map[string]bool) {
		t.Helper()
		got := status()
		for name, running := range running {
			if (got[name] == api.JobRunning) != running {
				t.Errorf("%s: job %s is %s; running: want %v", what, name, got[name], running)
			}
		}
	}
	turn()
	check("nodes changed", map[string]bool{"keep": true, "unusable": false, "taken": false, "deleted": true})
	mustUpdate(t, st, func(tx store.Tx) error { return tx.DeleteNode(ctx, "n-deleted") })
	turn()
	check("a node deleted", map[string]bool{"keep": true, "deleted": false})
}
