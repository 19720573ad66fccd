package storetest

import (
	"reflect"
	"slices"
	"strings"
	"testing"

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
