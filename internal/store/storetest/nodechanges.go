package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// changedNodes reads the nodes written after cursor: their ids (in the
// order listed), the total and the next cursor.
func changedNodes(t *testing.T, s store.Store, cursor string) ([]string, int, string) {
	t.Helper()
	var ids []string
	var total int
	var next string
	view(t, s, func(tx store.Tx) error {
		ns, n, c, err := tx.ChangedNodes(t.Context(), cursor)
		if err != nil {
			t.Fatalf("ChangedNodes(%q): %v", cursor, err)
		}
		for _, x := range ns {
			ids = append(ids, x.ID)
		}
		total, next = n, c
		return nil
	})
	return ids, total, next
}

// testChangedNodes checks the node feed the controller follows: a PutNode
// after the cursor is listed (in id order), a heartbeat is not, a
// deletion shows in the total, and a write in flight is listed by the
// next read.
func testChangedNodes(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	put := func(ns ...*api.Node) {
		update(t, s, func(tx store.Tx) error {
			for _, n := range ns {
				if err := tx.PutNode(ctx, n); err != nil {
					return err
				}
			}
			return nil
		})
	}
	node := func(id string) *api.Node {
		return &api.Node{ID: id, Workspace: "default", Compute: "cpu", State: api.NodeIdle, LastHeartbeat: when(1)}
	}
	a, b, c := node("a"), node("b"), node("c")
	a.State, a.Job = api.NodeRunning, "job-0"
	put(a, b)
	var cursor string
	view(t, s, func(tx store.Tx) (err error) {
		cursor, err = tx.NodeCursor(ctx)
		return err
	})
	b.State, b.Job = api.NodeRunning, "job-1"
	put(c, b)
	ids, total, next := changedNodes(t, s, cursor)
	// PostgreSQL may list a again (the cursor is the oldest transaction
	// running, on any database of the cluster); b and c must be there.
	exact := slices.Equal(ids, []string{"b", "c"})
	if !exact && !slices.Equal(ids, []string{"a", "b", "c"}) || total != 3 {
		t.Errorf("ChangedNodes after writing c and b = %v of %d, want [b c] (or [a b c]) of 3", ids, total)
	}

	// A heartbeat is no change, but reads see it.
	beat := store.NodeBeat{LastHeartbeat: when(5), Utilization: &api.NodeUtilization{CPUPercent: 42}, JobUsage: &api.JobUsage{CPUSeconds: 3}}
	update(t, s, func(tx store.Tx) error { return tx.PutNodeBeats(ctx, map[string]store.NodeBeat{"a": beat}) })
	if ids, _, next = changedNodes(t, s, next); exact && slices.Contains(ids, "a") {
		t.Errorf("ChangedNodes after a heartbeat of a = %v: a heartbeat is no change", ids)
	}
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetNode(ctx, "a")
		if err != nil {
			t.Fatalf("GetNode: %v", err)
		}
		if got.State != api.NodeRunning || got.Job != "job-0" || !reflect.DeepEqual(store.BeatOf(got), store.BeatOf(&api.Node{
			LastHeartbeat: when(5).UTC(), Utilization: beat.Utilization, JobUsage: beat.JobUsage})) {
			t.Errorf("GetNode after a heartbeat = %+v, want the record with the heartbeat's fields", *got)
		}
		seen, err := tx.NodesSeenBefore(ctx, when(3))
		if err != nil {
			t.Fatalf("NodesSeenBefore: %v", err)
		}
		var silent []string
		for _, x := range seen {
			silent = append(silent, x.ID)
			checkUTC(t, "last seen of "+x.ID, x.LastSeen, when(1))
		}
		if !slices.Equal(silent, []string{"b", "c"}) {
			t.Errorf("NodesSeenBefore(minute 3) = %v, want [b c] (a beat at minute 5)", silent)
		}
		return nil
	})
	// (NodeBeats locks the nodes it reads: it runs in an update.)
	update(t, s, func(tx store.Tx) error {
		held, err := tx.NodeBeats(ctx, []string{"a", "missing", "b"})
		gb := held["a"].Beat
		if err != nil || len(held) != 2 || held["a"].Job != "job-0" || !gb.LastHeartbeat.Equal(when(5)) || gb.Utilization == nil || gb.Utilization.CPUPercent != 42 ||
			held["b"].Job != "job-1" || !held["b"].Beat.LastHeartbeat.Equal(when(1)) {
			t.Errorf("NodeBeats(a, missing, b) = %+v, %v; want a's job-0 and the heartbeat, b's job-1 and its first", held, err)
		}
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error {
		return tx.PutNodeBeats(ctx, map[string]store.NodeBeat{"b": beat, "missing": beat})
	})
	wantErr(t, "heartbeat of a missing node", err, store.ErrNotFound)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("heartbeats of b and a missing node: %v, want an error naming the missing node", err)
	}
	// Several nodes' heartbeats in one call.
	two := map[string]store.NodeBeat{"a": {LastHeartbeat: when(6), Cache: &api.NodeCache{Hits: 7}}, "b": {LastHeartbeat: when(7)}}
	update(t, s, func(tx store.Tx) error { return tx.PutNodeBeats(ctx, two) })
	view(t, s, func(tx store.Tx) error {
		for id, want := range two {
			got, err := tx.GetNode(ctx, id)
			if err != nil || !reflect.DeepEqual(store.BeatOf(got), store.BeatOf(&api.Node{LastHeartbeat: want.LastHeartbeat.UTC(), Cache: want.Cache})) {
				t.Errorf("node %s after PutNodeBeats: %+v, %v; want its heartbeat %+v", id, got, err, want)
			}
		}
		return nil
	})

	// A deletion lists nothing; the total says it.
	update(t, s, func(tx store.Tx) error { return tx.DeleteNode(ctx, "c") })
	ids, total, next = changedNodes(t, s, next)
	if slices.Contains(ids, "c") || total != 2 {
		t.Errorf("ChangedNodes after deleting c = %v of %d, want no c, of 2", ids, total)
	}

	// A write in flight while the feed is read is listed by the next read.
	d := node("d")
	commit := heldWrite(t, s, func(tx store.Tx) error { return tx.PutNode(ctx, d) })
	ids, _, next = changedNodes(t, s, next)
	if slices.Contains(ids, "d") {
		t.Fatalf("ChangedNodes listed d before its transaction committed")
	}
	commit()
	if ids, total, _ = changedNodes(t, s, next); !slices.Contains(ids, "d") || total != 3 {
		t.Errorf("ChangedNodes after d committed = %v of %d, want d, of 3", ids, total)
	}
	view(t, s, func(tx store.Tx) error {
		if _, _, _, err := tx.ChangedNodes(ctx, "not a cursor"); err == nil {
			t.Errorf("ChangedNodes accepted the cursor %q", "not a cursor")
		}
		return nil
	})
}

// testReleaseNode checks ReleaseNode: a node that runs the assignment
// loses its job and, when running, takes the state (and reason as its
// error) since the time given; every other field, heartbeat ones
// included, is kept; a node that runs something else, or none, is left
// alone; and the node feed lists what it wrote.
func testReleaseNode(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	node := func(id, state, job string) *api.Node {
		return &api.Node{ID: id, Workspace: "default", Compute: "cpu", Location: "local", State: state, Job: job,
			Address: "10.0.0.1", StateSince: when(1), CreatedOn: when(0), Error: "earlier", LastHeartbeat: when(2),
			Utilization: &api.NodeUtilization{CPUPercent: 50}}
	}
	stored := []*api.Node{node("idle", api.NodeRunning, "default/j/1"), node("leaving", api.NodeRunning, "default/j/1"),
		node("gone", api.NodeLeaving, "default/j/1"), node("other", api.NodeRunning, "default/k/1")}
	var cursor string
	update(t, s, func(tx store.Tx) (err error) {
		for _, n := range stored {
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) (err error) {
		cursor, err = tx.NodeCursor(ctx)
		return err
	})
	now := when(5).Add(123456789 * time.Nanosecond)
	update(t, s, func(tx store.Tx) error {
		for _, c := range []struct{ id, state, reason string }{{"idle", api.NodeIdle, ""},
			{"leaving", api.NodeLeaving, "its agent is stopping"}, {"gone", api.NodeIdle, ""},
			{"other", api.NodeIdle, ""}, {"missing", api.NodeIdle, ""}} {
			if err := tx.ReleaseNode(ctx, c.id, "default/j/1", c.state, c.reason, now); err != nil {
				t.Errorf("ReleaseNode(%s): %v", c.id, err)
			}
		}
		return nil
	})
	want := map[string]*api.Node{}
	for _, n := range stored {
		c := *n
		want[n.ID] = &c
	}
	want["idle"].Job, want["idle"].State, want["idle"].StateSince = "", api.NodeIdle, now
	want["leaving"].Job, want["leaving"].State, want["leaving"].StateSince, want["leaving"].Error = "", api.NodeLeaving, now, "its agent is stopping"
	want["gone"].Job = ""
	view(t, s, func(tx store.Tx) error {
		for id, w := range want {
			got, err := tx.GetNode(ctx, id)
			if err != nil {
				return err
			}
			w.CreatedOn, w.StateSince, w.LastHeartbeat = w.CreatedOn.UTC(), w.StateSince.UTC(), w.LastHeartbeat.UTC()
			got.CreatedOn, got.StateSince, got.LastHeartbeat = got.CreatedOn.UTC(), got.StateSince.UTC(), got.LastHeartbeat.UTC()
			if !reflect.DeepEqual(got, w) {
				t.Errorf("node %s after ReleaseNode:\n got %+v\nwant %+v", id, got, w)
			}
		}
		return nil
	})
	// (A node may be listed again unchanged: "other" may be too.)
	ids, _, _ := changedNodes(t, s, cursor)
	for _, id := range []string{"gone", "idle", "leaving"} {
		if !slices.Contains(ids, id) {
			t.Errorf("ChangedNodes after ReleaseNode = %v, without %s", ids, id)
		}
	}
}

// testComputeUtilizations checks the compute samples' sums: by compute,
// over the nodes that reported utilization, as written by PutNode or by
// a heartbeat (PutNodeBeats), GPU as the mean of those that measured one.
func testComputeUtilizations(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	gpu := func(v float64) *float64 { return &v }
	node := func(id, ws, compute string, u *api.NodeUtilization) *api.Node {
		return &api.Node{ID: id, Workspace: ws, Compute: compute, State: api.NodeIdle, LastHeartbeat: when(1), Utilization: u}
	}
	update(t, s, func(tx store.Tx) error {
		for _, n := range []*api.Node{
			node("a", "ws", "gpu", &api.NodeUtilization{CPUPercent: 10.25, MemoryBytes: 100, GPUPercent: gpu(50)}),
			node("b", "ws", "gpu", nil),
			node("c", "ws", "gpu", &api.NodeUtilization{CPUPercent: 1, MemoryBytes: 1 << 40}),
			node("d", "other", "gpu", &api.NodeUtilization{CPUPercent: 3}),
			node("e", "ws", "idle", nil),
		} {
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		return tx.PutNodeBeats(ctx, map[string]store.NodeBeat{"b": {LastHeartbeat: when(2),
			Utilization: &api.NodeUtilization{CPUPercent: 20.5, MemoryBytes: 200, GPUPercent: gpu(70)}}})
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.ComputeUtilizations(ctx)
		if err != nil {
			t.Fatalf("ComputeUtilizations: %v", err)
		}
		want := map[[2]string]store.ComputeUtilization{
			{"ws", "gpu"}:    {CPUPercent: 31.75, MemoryBytes: 300 + 1<<40, GPUPercent: gpu(60)},
			{"other", "gpu"}: {CPUPercent: 3},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ComputeUtilizations = %s, want %s", fmtUtilizations(got), fmtUtilizations(want))
		}
		return nil
	})
}

func fmtUtilizations(m map[[2]string]store.ComputeUtilization) string {
	var out []string
	for k, u := range m {
		g := "nil"
		if u.GPUPercent != nil {
			g = strconv.FormatFloat(*u.GPUPercent, 'g', -1, 64)
		}
		out = append(out, fmt.Sprintf("%s/%s: cpu %g, memory %d, gpu %s", k[0], k[1], u.CPUPercent, u.MemoryBytes, g))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
