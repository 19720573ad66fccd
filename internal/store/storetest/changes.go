package storetest

import (
	"encoding/json"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// changedJobs reads the jobs written after cursor and the next cursor, by
// name with their etags.
func changedJobs(t *testing.T, s store.Store, cursor string) (map[string]string, []string, string) {
	t.Helper()
	got := map[string]string{}
	var order []string
	var next string
	view(t, s, func(tx store.Tx) error {
		js, c, err := tx.ChangedJobs(t.Context(), cursor)
		if err != nil {
			t.Fatalf("ChangedJobs(%q): %v", cursor, err)
		}
		for _, j := range js {
			got[j.Name] = j.Etag
			order = append(order, j.Name)
		}
		next = c
		return nil
	})
	return got, order, next
}

// testChangedJobs checks the change feed the controller follows: every
// write after the cursor is listed, in creation order, with its etag; one
// that commits after a read is listed by the next read, not skipped.
func testChangedJobs(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	a, b := newJob("default", "a", "cpu", api.JobQueued), newJob("default", "b", "cpu", api.JobQueued)
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, a, "") })
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, b, "") })
	var cursor string
	view(t, s, func(tx store.Tx) (err error) {
		cursor, err = tx.JobCursor(ctx)
		return err
	})
	c := newJob("default", "c", "gpu", api.JobQueued)
	a.Status = api.JobCompleted
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutJob(ctx, c, ""); err != nil {
			return err
		}
		return tx.PutJob(ctx, a, "")
	})
	got, order, next := changedJobs(t, s, cursor)
	if got["a"] != a.Etag || got["c"] != c.Etag {
		t.Errorf("ChangedJobs after a write = %v, want a at etag %s and c at %s", got, a.Etag, c.Etag)
	}
	if got["b"] != "" && got["b"] != b.Etag {
		t.Errorf("ChangedJobs listed b at etag %s; it is unchanged at %s", got["b"], b.Etag)
	}
	if ia, ic := index(order, "a"), index(order, "c"); ia > ic {
		t.Errorf("ChangedJobs order = %v, want creation order (a before c)", order)
	}

	// Nothing written: only unchanged jobs may come back.
	got, _, next = changedJobs(t, s, next)
	for name, etag := range got {
		if want := map[string]string{"a": a.Etag, "b": b.Etag, "c": c.Etag}[name]; etag != want {
			t.Errorf("ChangedJobs with no write listed %s at etag %s, want none or %s", name, etag, want)
		}
	}

	// A write in flight while the feed is read is listed by the next read.
	d := newJob("default", "d", "cpu", api.JobQueued)
	commit := heldWrite(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, d, "") })
	got, _, next = changedJobs(t, s, next)
	if _, ok := got["d"]; ok {
		t.Fatalf("ChangedJobs listed d before its transaction committed")
	}
	commit()
	if got, _, _ = changedJobs(t, s, next); got["d"] != d.Etag {
		t.Errorf("ChangedJobs after d committed = %v, want d at etag %s", got, d.Etag)
	}

	view(t, s, func(tx store.Tx) error {
		_, _, err := tx.ChangedJobs(ctx, "not a cursor")
		if err == nil {
			t.Errorf("ChangedJobs accepted the cursor %q", "not a cursor")
		}
		return nil
	})
}

func index(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// testQueuePosition checks a queued job's place in its compute's queue:
// higher priority first, then creation order; other computes, other
// workspaces and jobs not queued do not count.
func testQueuePosition(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default", "other")
	jobs := []*api.Job{
		newJob("default", "first", "cpu", api.JobQueued),
		newJob("default", "running", "cpu", api.JobRunning),
		newJob("default", "second", "cpu", api.JobQueued),
		newJob("default", "gpu", "gpu", api.JobQueued),
		newJob("other", "elsewhere", "cpu", api.JobQueued),
		newJob("default", "urgent", "cpu", api.JobQueued),
		newJob("default", "low", "cpu", api.JobQueued),
	}
	jobs[5].QueueSettings = &api.QueueSettings{Priority: "high"}
	jobs[6].QueueSettings = &api.QueueSettings{Priority: "low"}
	for _, j := range jobs {
		update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, "") })
	}
	want := map[string]int{"urgent": 1, "first": 2, "second": 3, "low": 4, "gpu": 1, "running": 0, "missing": 0}
	view(t, s, func(tx store.Tx) error {
		for name, pos := range want {
			got, err := tx.QueuePosition(ctx, "default", name)
			if err != nil || got != pos {
				t.Errorf("QueuePosition(%s) = %d, %v; want %d", name, got, err, pos)
			}
		}
		if got, err := tx.QueuePosition(ctx, "other", "elsewhere"); err != nil || got != 1 {
			t.Errorf("QueuePosition(other/elsewhere) = %d, %v; want 1", got, err)
		}
		return nil
	})
}

// heldWrite runs write in a write transaction of s that stays open until
// the returned commit is called; commit waits for it to end and fails the
// test on its error. A feed read in between must not list the write.
func heldWrite(t *testing.T, s store.Store, write func(tx store.Tx) error) (commit func()) {
	t.Helper()
	written, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- s.Update(t.Context(), func(tx store.Tx) error {
			if err := write(tx); err != nil {
				return err
			}
			select { // a retried attempt does not wait again
			case <-written:
			default:
				close(written)
			}
			<-release
			return nil
		})
	}()
	<-written
	return func() {
		t.Helper()
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("update: %v", err)
		}
	}
}

// testSetPendingReason checks that a queued job's pending reason is set in
// its stored document, the rest of it kept, as a job write (a new etag,
// listed by the change feed); and that a job that is not queued, is gone
// or has that reason already is not written.
func testSetPendingReason(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	q, r := newJob("default", "q", "cpu", api.JobQueued), newJob("default", "r", "cpu", api.JobRunning)
	q.PendingReason, q.QueueSettings, q.Tags = "waiting for the scheduler", &api.QueueSettings{Priority: "high"}, map[string]string{"k": "v"}
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		if err := tx.PutJob(ctx, q, ""); err != nil {
			return err
		}
		return tx.PutJob(ctx, r, "")
	})
	var cursor string
	view(t, s, func(tx store.Tx) (err error) {
		cursor, err = tx.JobCursor(ctx)
		return err
	})
	set := func(name, reason string) bool {
		t.Helper()
		var wrote int
		update(t, s, func(tx store.Tx) (err error) {
			wrote, err = tx.SetPendingReasons(ctx, map[store.JobKey]string{{Workspace: "default", Name: name}: reason})
			return err
		})
		return wrote == 1
	}
	const reason = `compute at max_instances (2 node(s), all busy) "quoted" – ünïcode`
	if !set("q", reason) {
		t.Fatalf("SetPendingReasons of a queued job wrote nothing")
	}
	var got *api.Job
	view(t, s, func(tx store.Tx) (err error) {
		got, err = tx.GetJob(ctx, "default", "q")
		return err
	})
	want := *q
	want.PendingReason, want.Etag, want.CreatedOn = reason, got.Etag, q.CreatedOn.UTC()
	if got.Etag == q.Etag || !sameJSON(*got, want) {
		t.Errorf("after SetPendingReasons the job is\n%+v\nwant the stored one with the reason and a new etag\n%+v", *got, want)
	}
	if changed, _, _ := changedJobs(t, s, cursor); changed["q"] != got.Etag {
		t.Errorf("ChangedJobs after SetPendingReasons = %v, want q at etag %s", changed, got.Etag)
	}
	if set("q", reason) {
		t.Errorf("SetPendingReasons wrote a reason the job has already")
	}
	if set("r", "waiting") || set("missing", "waiting") {
		t.Errorf("SetPendingReasons wrote a job that is not queued, or one that does not exist")
	}
	view(t, s, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, "default", "r")
		if err != nil || j.PendingReason != "" || j.Etag != r.Etag {
			t.Errorf("a running job after SetPendingReasons: %+v, %v; want it unchanged", j, err)
		}
		return nil
	})
	if !set("q", "") {
		t.Errorf("SetPendingReasons of an empty reason wrote nothing")
	}
	// Several at once: each written job gets an etag of its own.
	more := map[store.JobKey]string{{Workspace: "default", Name: "r"}: "not queued", {Workspace: "default", Name: "missing"}: "gone"}
	for _, name := range []string{"q2", "q3", "q4"} {
		update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, newJob("default", name, "cpu", api.JobQueued), "") })
		more[store.JobKey{Workspace: "default", Name: name}] = "reason of " + name
	}
	more[store.JobKey{Workspace: "default", Name: "q"}] = "" // has it already
	var wrote int
	update(t, s, func(tx store.Tx) (err error) {
		wrote, err = tx.SetPendingReasons(ctx, more)
		return err
	})
	if wrote != 3 {
		t.Errorf("SetPendingReasons of 3 queued jobs, one with its reason, one not queued and one missing wrote %d, want 3", wrote)
	}
	etags := map[string]bool{}
	view(t, s, func(tx store.Tx) error {
		for _, name := range []string{"q2", "q3", "q4"} {
			j, err := tx.GetJob(ctx, "default", name)
			if err != nil {
				return err
			}
			if j.PendingReason != "reason of "+name || etags[j.Etag] {
				t.Errorf("job %s after SetPendingReasons: reason %q etag %s; want its reason and an etag of its own", name, j.PendingReason, j.Etag)
			}
			etags[j.Etag] = true
		}
		return nil
	})
}

// sameJSON reports whether a and b encode alike.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
