package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// testOnCommit: a function queued with OnCommit runs once after the
// transaction commits, and never when it rolls back or only reads.
func testOnCommit(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	var ran []string
	update(t, s, func(tx store.Tx) error {
		tx.OnCommit(func() { ran = append(ran, "committed") })
		if len(ran) != 0 {
			t.Errorf("OnCommit ran before the commit")
		}
		return tx.PutSetting(ctx, "k", "v")
	})
	failed := errors.New("no")
	err := s.Update(ctx, func(tx store.Tx) error {
		tx.OnCommit(func() { ran = append(ran, "rolled back") })
		return failed
	})
	wantErr(t, "failed update", err, failed)
	view(t, s, func(tx store.Tx) error {
		tx.OnCommit(func() { ran = append(ran, "viewed") })
		return nil
	})
	if !slices.Equal(ran, []string{"committed"}) {
		t.Errorf("OnCommit ran %q, want only [committed]", ran)
	}
}

// testSavepoint checks that a failed savepoint undoes its writes (the
// queued count the store keeps included) and drops its OnCommit functions,
// and that the transaction goes on and commits the rest, nested ones too.
func testSavepoint(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	refused := errors.New("refused")
	var ran []string
	update(t, s, func(tx store.Tx) error {
		put := func(name string) func() error {
			return func() error {
				tx.OnCommit(func() { ran = append(ran, name) })
				return tx.PutJob(ctx, newJob("default", name, "cpu", api.JobQueued), "")
			}
		}
		if err := tx.Savepoint(ctx, put("a")); err != nil {
			return err
		}
		err := tx.Savepoint(ctx, func() error {
			if err := put("b")(); err != nil {
				return err
			}
			return refused
		})
		wantErr(t, "failed savepoint", err, refused)
		err = tx.Savepoint(ctx, func() error {
			if err := put("c")(); err != nil {
				return err
			}
			wantErr(t, "failed nested savepoint", tx.Savepoint(ctx, func() error {
				if err := put("d")(); err != nil {
					return err
				}
				return refused
			}), refused)
			return tx.Savepoint(ctx, put("e"))
		})
		if err != nil {
			return err
		}
		// A write the savepoint undid can be made again.
		return tx.Savepoint(ctx, put("b"))
	})
	if want := []string{"a", "c", "e", "b"}; !slices.Equal(ran, want) {
		t.Errorf("OnCommit ran %q, want %q", ran, want)
	}
	view(t, s, func(tx store.Tx) error {
		js, err := tx.ListJobs(ctx, store.JobFilter{Workspace: "default"})
		if err != nil {
			return err
		}
		var names []string
		for _, j := range js {
			names = append(names, j.Name)
		}
		if want := []string{"a", "c", "e", "b"}; !slices.Equal(names, want) {
			t.Errorf("jobs after the savepoints = %q, want %q", names, want)
		}
		if n, err := tx.QueuedJobs(ctx, "default"); err != nil || n != 4 {
			t.Errorf("QueuedJobs = %d, %v; want 4", n, err)
		}
		return nil
	})
}

// testSavepointRevisions checks that writes after a savepoint that was
// undone, and those of later transactions, are written after every stored
// one: ChangedJobs from a cursor read before lists each of them once, in
// order, with etags that rise. (A store may count a transaction's
// revisions itself and store the last at its end; a savepoint undoing the
// first must not make the next transaction take them again.)
func testSavepointRevisions(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	refused := errors.New("refused")
	put := func(tx store.Tx, name string) error {
		return tx.PutJob(ctx, newJob("default", name, "cpu", api.JobQueued), "")
	}
	var cursor string
	view(t, s, func(tx store.Tx) (err error) {
		cursor, err = tx.JobCursor(ctx)
		return err
	})
	undone := func(tx store.Tx, name string) {
		err := tx.Savepoint(ctx, func() error {
			if err := put(tx, name); err != nil {
				return err
			}
			return refused
		})
		wantErr(t, "savepoint of "+name, err, refused)
	}
	update(t, s, func(tx store.Tx) error { undone(tx, "a"); return nil })
	update(t, s, func(tx store.Tx) error {
		undone(tx, "b")
		if err := put(tx, "c"); err != nil {
			return err
		}
		return put(tx, "d")
	})
	update(t, s, func(tx store.Tx) error { return put(tx, "e") })
	update(t, s, func(tx store.Tx) error {
		if err := put(tx, "f"); err != nil {
			return err
		}
		undone(tx, "g")
		return nil
	})
	update(t, s, func(tx store.Tx) error { return put(tx, "h") })
	view(t, s, func(tx store.Tx) error {
		js, _, err := tx.ChangedJobs(ctx, cursor)
		if err != nil {
			return err
		}
		var names []string
		last := int64(0)
		for _, j := range js {
			names = append(names, j.Name)
			etag, err := strconv.ParseInt(j.Etag, 10, 64)
			if err != nil || etag <= last {
				t.Errorf("job %s: etag %q after %d; want a higher number", j.Name, j.Etag, last)
			}
			last = etag
		}
		if want := []string{"c", "d", "e", "f", "h"}; !slices.Equal(names, want) {
			t.Errorf("ChangedJobs = %q, want %q", names, want)
		}
		return nil
	})
}

func testRollback(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutCompute(ctx, newCompute("default", "cpu"), ""); err != nil {
			return err
		}
		if err := tx.PutSetting(ctx, "k", "v"); err != nil {
			return err
		}
		if err := tx.AppendLog(ctx, "default", "j", logLines(1, 0, 1, 2)); err != nil {
			return err
		}
		if err := tx.AddEvent(ctx, "default", "job/j", &api.Event{Time: when(0), Kind: "k", Message: "m"}); err != nil {
			return err
		}
		// The transaction sees its own writes.
		if _, err := tx.GetCompute(ctx, "default", "cpu"); err != nil {
			t.Errorf("get compute inside the transaction that put it: %v", err)
		}
		return fmt.Errorf("deciding: %w", boom)
	})
	wantErr(t, "update whose fn fails", err, boom)
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetCompute(ctx, "default", "cpu")
		wantErr(t, "get rolled back compute", err, store.ErrNotFound)
		_, err = tx.GetSetting(ctx, "k")
		wantErr(t, "get rolled back setting", err, store.ErrNotFound)
		if ls, err := tx.ReadLog(ctx, "default", "j", 0, 0); err != nil || len(ls) != 0 {
			t.Errorf("rolled back log = %v, %v; want none", ls, err)
		}
		if es, err := tx.ListEvents(ctx, "default", "job/j", 0, 0); err != nil || len(es) != 0 {
			t.Errorf("rolled back events = %v, %v; want none", es, err)
		}
		return nil
	})
	// Seqs of rolled back lines are given out again.
	lines := logLines(1, 0, 1, 1)
	update(t, s, func(tx store.Tx) error { return tx.AppendLog(ctx, "default", "j", lines) })
	if lines[0].Seq != 1 {
		t.Errorf("seq after a rollback = %d, want 1", lines[0].Seq)
	}
	// An error from a View comes back too.
	err = s.View(ctx, func(tx store.Tx) error {
		_, err := tx.GetJob(ctx, "default", "missing")
		return err
	})
	wantErr(t, "view whose fn fails", err, store.ErrNotFound)
}

func testViewIsReadOnly(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	err := s.View(ctx, func(tx store.Tx) error { return tx.PutSetting(ctx, "k", "v") })
	if err == nil {
		t.Fatalf("PutSetting in a View succeeded, want an error")
	}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetSetting(ctx, "k")
		wantErr(t, "get setting written in a view", err, store.ErrNotFound)
		return nil
	})
}

func testCanceledContext(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	err := s.Update(ctx, func(tx store.Tx) error {
		called = true
		return tx.PutSetting(ctx, "k", "v")
	})
	wantErr(t, "update with a canceled context", err, context.Canceled)
	err = s.View(ctx, func(tx store.Tx) error {
		_, err := tx.GetSetting(ctx, "k")
		return err
	})
	if err == nil {
		t.Errorf("view with a canceled context succeeded")
	}
	if called {
		view(t, s, func(tx store.Tx) error {
			_, err := tx.GetSetting(t.Context(), "k")
			wantErr(t, "setting written with a canceled context", err, store.ErrNotFound)
			return nil
		})
	}
}

// testConcurrentUpdates increments one counter from many goroutines: every
// increment must land exactly once, which fails if a backend lets two
// read-modify-write transactions interleave.
func testConcurrentUpdates(t *testing.T, open Opener) {
	s := openStore(t, open)
	const goroutines, increments = 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range increments {
				err := s.Update(t.Context(), func(tx store.Tx) error {
					v, err := tx.GetSetting(t.Context(), "counter")
					if errors.Is(err, store.ErrNotFound) {
						v, err = "0", nil
					}
					if err != nil {
						return err
					}
					n, err := strconv.Atoi(v)
					if err != nil {
						return err
					}
					return tx.PutSetting(t.Context(), "counter", strconv.Itoa(n+1))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent update: %v", err)
	}
	view(t, s, func(tx store.Tx) error {
		v, err := tx.GetSetting(t.Context(), "counter")
		if want := strconv.Itoa(goroutines * increments); err != nil || v != want {
			t.Errorf("counter = %q, %v; want %s", v, err, want)
		}
		return nil
	})
}

func testReopen(t *testing.T, open Opener) {
	ctx := t.Context()
	s, err := open(ctx)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	c := newCompute("default", "cpu")
	lines := logLines(1, 0, 1, 3)
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		if err := tx.PutJob(ctx, newJob("default", "j", "cpu", api.JobQueued), ""); err != nil {
			return err
		}
		if err := tx.AppendLog(ctx, "default", "j", lines); err != nil {
			return err
		}
		if err := tx.AddEvent(ctx, "default", "job/j", &api.Event{Time: when(0), Kind: "k"}); err != nil {
			return err
		}
		return tx.PutSetting(ctx, "k", "v")
	})
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	s = openStore(t, open)
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetCompute(ctx, "default", "cpu")
		if err != nil || got.Etag != c.Etag {
			t.Errorf("compute after reopen = %+v, %v; want etag %q", got, err, c.Etag)
		}
		if _, err := tx.GetJob(ctx, "default", "j"); err != nil {
			t.Errorf("job after reopen: %v", err)
		}
		if v, err := tx.GetSetting(ctx, "k"); err != nil || v != "v" {
			t.Errorf("setting after reopen = %q, %v", v, err)
		}
		return nil
	})
	// Counters carry on where they were: etags are not reused, seqs stay dense.
	more := logLines(1, 0, 3, 4)
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutCompute(ctx, newCompute("default", "cpu"), c.Etag); err != nil {
			return err
		}
		return tx.AppendLog(ctx, "default", "j", more)
	})
	if got := seqs(more); !reflect.DeepEqual(got, []int64{3, 4}) {
		t.Errorf("seqs after reopen = %v, want [3 4]", got)
	}
	err = s.Update(ctx, func(tx store.Tx) error {
		e := &api.Event{Time: when(1), Kind: "k"}
		if err := tx.AddEvent(ctx, "default", "job/j", e); err != nil {
			return err
		}
		if e.Seq != 2 {
			t.Errorf("event seq after reopen = %d, want 2", e.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("update after reopen: %v", err)
	}
}

// testConcurrentOpen opens a new database from two goroutines at once, as two
// server replicas starting together do: both must migrate without racing.
func testConcurrentOpen(t *testing.T, open Opener) {
	stores := make([]store.Store, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = open(t.Context()) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Errorf("open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	if t.Failed() {
		t.FailNow()
	}
	update(t, stores[0], func(tx store.Tx) error { return tx.PutSetting(t.Context(), "k", "from 0") })
	view(t, stores[1], func(tx store.Tx) error {
		if v, err := tx.GetSetting(t.Context(), "k"); err != nil || v != "from 0" {
			t.Errorf("setting seen by the second store = %q, %v", v, err)
		}
		return nil
	})
}
