package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// testBatchWrites checks that PutJobs and PutNodes write what PutJob and
// PutNode write one by one (etags, creation order, the change feeds,
// counts, events and their seqs), and GetNodes reads what GetNode does.
func testBatchWrites(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default", "other")
	old := newJob("default", "old", "cpu", api.JobQueued)
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutJob(ctx, old, ""); err != nil {
			return err
		}
		return tx.PutNode(ctx, &api.Node{ID: "n0", Workspace: "default", Compute: "cpu", State: api.NodeIdle, LastHeartbeat: when(1)})
	})
	var jobCursor, nodeCursor string
	view(t, s, func(tx store.Tx) (err error) {
		if jobCursor, err = tx.JobCursor(ctx); err != nil {
			return err
		}
		nodeCursor, err = tx.NodeCursor(ctx)
		return err
	})

	// Jobs: one stored (updated, keeps its place) and two new, one of them
	// twice (the last write wins, created once).
	oldEtag := old.Etag
	old.Status, old.PendingReason = api.JobPreparing, ""
	a, b := newJob("default", "a", "cpu", api.JobQueued), newJob("other", "b", "gpu", api.JobQueued)
	b2 := *b
	b2.PendingReason = "second write"
	js := []*api.Job{a, old, b, &b2}
	update(t, s, func(tx store.Tx) error { return tx.PutJobs(ctx, puts(js...)) })
	etags := map[string]bool{}
	for _, j := range js {
		if j.Etag == "" || etags[j.Etag] {
			t.Errorf("job %s: etag %q after PutJobs, want a new one of its own", j.Name, j.Etag)
		}
		etags[j.Etag] = true
	}
	if old.Etag == oldEtag {
		t.Errorf("stored job kept its etag %s", oldEtag)
	}
	view(t, s, func(tx store.Tx) error {
		for _, want := range []*api.Job{a, old, &b2} {
			got, err := tx.GetJob(ctx, want.Workspace, want.Name)
			if err != nil {
				return err
			}
			if got.Etag != want.Etag || got.Status != want.Status || got.PendingReason != want.PendingReason {
				t.Errorf("job %s after PutJobs: etag %s status %s reason %q, want %s %s %q",
					want.Name, got.Etag, got.Status, got.PendingReason, want.Etag, want.Status, want.PendingReason)
			}
		}
		changed, _, err := tx.ChangedJobs(ctx, jobCursor)
		if err != nil {
			return err
		}
		var names []string
		for _, j := range changed {
			names = append(names, j.Name)
		}
		// Creation order: the stored job first, then the new ones in
		// PutJobs' order.
		if !reflect.DeepEqual(names, []string{"old", "a", "b"}) {
			t.Errorf("ChangedJobs after PutJobs = %v, want [old a b]", names)
		}
		for ws, want := range map[string]int{"default": 1, "other": 1} {
			if n, err := tx.QueuedJobs(ctx, ws); err != nil || n != want {
				t.Errorf("QueuedJobs(%s) = %d, %v; want %d", ws, n, err, want)
			}
		}
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error {
		return tx.PutJobs(ctx, puts(newJob("default", "c", "cpu", api.JobQueued), newJob("nowhere", "d", "cpu", api.JobQueued)))
	})
	wantErr(t, "PutJobs into a missing workspace", err, store.ErrNotFound)

	// Nodes: n0 updated (its heartbeat fields with it), n1 and n2 new.
	ns := []*api.Node{
		{ID: "n2", Workspace: "default", Compute: "cpu", State: api.NodeIdle},
		{ID: "n0", Workspace: "default", Compute: "cpu", State: api.NodeRunning, Job: "default/old/1", LastHeartbeat: when(5)},
		{ID: "n1", Workspace: "other", Compute: "gpu", State: api.NodePreparing, CreatedOn: when(2)},
	}
	update(t, s, func(tx store.Tx) error { return tx.PutNodes(ctx, ns) })
	err = s.Update(ctx, func(tx store.Tx) error { return tx.PutNodes(ctx, []*api.Node{{ID: ""}}) })
	if err == nil {
		t.Error("PutNodes of a node without an id: no error")
	}
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetNodes(ctx, []string{"n2", "missing", "n0", "n1"})
		if err != nil {
			return err
		}
		var ids []string
		for _, n := range got {
			ids = append(ids, n.ID)
			one, err := tx.GetNode(ctx, n.ID)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(*one, n) {
				t.Errorf("GetNodes' %s = %+v, GetNode's %+v", n.ID, n, *one)
			}
		}
		if !reflect.DeepEqual(ids, []string{"n0", "n1", "n2"}) {
			t.Errorf("GetNodes = %v, want the stored ones in id order [n0 n1 n2]", ids)
		}
		if n := got[0]; n.State != api.NodeRunning || n.Job != "default/old/1" || !n.LastHeartbeat.Equal(when(5)) {
			t.Errorf("n0 after PutNodes: %s %q heartbeat %s", n.State, n.Job, n.LastHeartbeat)
		}
		changed, total, _, err := tx.ChangedNodes(ctx, nodeCursor)
		if err != nil {
			return err
		}
		ids = nil
		for _, n := range changed {
			ids = append(ids, n.ID)
		}
		if !reflect.DeepEqual(ids, []string{"n0", "n1", "n2"}) || total != 3 {
			t.Errorf("ChangedNodes after PutNodes = %v of %d, want [n0 n1 n2] of 3", ids, total)
		}
		if seen, err := tx.NodesSeenBefore(ctx, when(4)); err != nil || !slices.ContainsFunc(seen, func(x store.NodeSeen) bool { return x.ID == "n1" }) ||
			slices.ContainsFunc(seen, func(x store.NodeSeen) bool { return x.ID == "n0" }) {
			t.Errorf("NodesSeenBefore after PutNodes = %v, %v; want n1 (never seen), not n0", seen, err)
		}
		return nil
	})

	// Events: seqs follow the job's last, dense, in order, several of one
	// job in one call.
	update(t, s, func(tx store.Tx) error {
		return tx.AddEvent(ctx, "default", "job/a", &api.Event{Time: when(1), Kind: "Created", Message: "first"})
	})
	ev := func(i int) *api.Event {
		return &api.Event{Time: when(2 + i), Kind: "Assigned", Message: fmt.Sprintf("batch %d", i)}
	}
	bOther := newJob("other", "a", "gpu", api.JobQueued)
	ps := []store.JobPut{{Job: a, Events: []*api.Event{ev(0)}}, {Job: b, Events: []*api.Event{ev(1)}}, {Job: a, Events: []*api.Event{ev(2)}},
		{Job: bOther, Events: []*api.Event{{Time: when(9), Kind: "Created", Message: "elsewhere"}}}, {Job: old}}
	update(t, s, func(tx store.Tx) error { return tx.PutJobs(ctx, ps) })
	var seqs []int64
	for _, p := range ps {
		for _, e := range p.Events {
			seqs = append(seqs, e.Seq)
		}
	}
	if want := []int64{2, 1, 3, 1}; !reflect.DeepEqual(seqs, want) {
		t.Errorf("PutJobs' event seqs = %v, want %v", seqs, want)
	}
	view(t, s, func(tx store.Tx) error {
		got, err := tx.ListEvents(ctx, "default", "job/a", 0, 0)
		if err != nil {
			return err
		}
		var msgs []string
		for _, e := range got {
			msgs = append(msgs, fmt.Sprintf("%d %s %s %s", e.Seq, e.Kind, e.Message, e.Time.UTC().Format("15:04")))
		}
		want := []string{"1 Created first " + when(1).UTC().Format("15:04"), "2 Assigned batch 0 " + when(2).UTC().Format("15:04"), "3 Assigned batch 2 " + when(4).UTC().Format("15:04")}
		if !reflect.DeepEqual(msgs, want) {
			t.Errorf("events of job/a after PutJobs = %q, want %q", msgs, want)
		}
		return nil
	})
}

// puts are PutJobs' writes of js, without events.
func puts(js ...*api.Job) []store.JobPut {
	out := make([]store.JobPut, len(js))
	for i, j := range js {
		out[i] = store.JobPut{Job: j}
	}
	return out
}
