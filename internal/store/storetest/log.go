package storetest

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func logLines(attempt, node int, from, to int64) []api.LogLine {
	var out []api.LogLine
	for i := from; i <= to; i++ {
		out = append(out, api.LogLine{
			Attempt: attempt, Node: node, NodeSeq: i, Time: when(int(i % 60)),
			Stream: "stdout", Text: fmt.Sprintf("attempt %d node %d line %d", attempt, node, i),
		})
	}
	return out
}

func seqs(lines []api.LogLine) []int64 {
	var out []int64
	for _, l := range lines {
		out = append(out, l.Seq)
	}
	return out
}

func testAppendLog(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	first := logLines(1, 0, 1, 3)
	update(t, s, func(tx store.Tx) error { return tx.AppendLog(ctx, "default", "job-1", first) })
	if got, want := seqs(first), []int64{1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Fatalf("seqs after the first append = %v, want %v", got, want)
	}
	// An agent resends lines 2..3 after a reconnect, with two new ones and a
	// line of another node; the batch also repeats one line.
	resent := append(logLines(1, 0, 2, 5), logLines(1, 1, 1, 1)...)
	resent = append(resent, logLines(1, 0, 5, 5)...)
	update(t, s, func(tx store.Tx) error { return tx.AppendLog(ctx, "default", "job-1", resent) })
	if got, want := seqs(resent), []int64{2, 3, 4, 5, 6, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("seqs after the resend = %v, want %v (a skipped line gets the seq it is stored under)", got, want)
	}
	// A second attempt numbers its lines from 1 again; they are new lines.
	retry := logLines(2, 0, 1, 2)
	update(t, s, func(tx store.Tx) error {
		if err := tx.AppendLog(ctx, "default", "job-1", retry); err != nil {
			return err
		}
		// Another job, and the same job name in another workspace, count from 1.
		if err := tx.AppendLog(ctx, "default", "job-2", logLines(1, 0, 1, 1)); err != nil {
			return err
		}
		return tx.AppendLog(ctx, "other", "job-1", logLines(1, 0, 1, 1))
	})
	if got, want := seqs(retry), []int64{7, 8}; !reflect.DeepEqual(got, want) {
		t.Errorf("seqs of the second attempt = %v, want %v", got, want)
	}
	view(t, s, func(tx store.Tx) error {
		all, err := tx.ReadLog(ctx, "default", "job-1", 0, 0)
		if err != nil {
			t.Fatalf("read log: %v", err)
		}
		if got, want := seqs(all), []int64{1, 2, 3, 4, 5, 6, 7, 8}; !reflect.DeepEqual(got, want) {
			t.Fatalf("stored seqs = %v, want %v", got, want)
		}
		wantText := []string{
			"attempt 1 node 0 line 1", "attempt 1 node 0 line 2", "attempt 1 node 0 line 3",
			"attempt 1 node 0 line 4", "attempt 1 node 0 line 5", "attempt 1 node 1 line 1",
			"attempt 2 node 0 line 1", "attempt 2 node 0 line 2",
		}
		for i, l := range all {
			if l.Text != wantText[i] {
				t.Errorf("line %d text = %q, want %q", l.Seq, l.Text, wantText[i])
			}
		}
		l := all[4]
		if l.Attempt != 1 || l.Node != 0 || l.NodeSeq != 5 || l.Stream != "stdout" {
			t.Errorf("line 5 = %+v, want attempt 1 node 0 node_seq 5 on stdout", l)
		}
		checkUTC(t, "line 5 time", l.Time, when(5))
		for _, k := range [][2]string{{"default", "job-2"}, {"other", "job-1"}} {
			ls, err := tx.ReadLog(ctx, k[0], k[1], 0, 0)
			if err != nil || len(ls) != 1 || ls[0].Seq != 1 {
				t.Errorf("ReadLog(%s, %s) = %v, %v; want one line with seq 1", k[0], k[1], ls, err)
			}
		}
		return nil
	})
}

func testReadLogPaging(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	update(t, s, func(tx store.Tx) error { return tx.AppendLog(ctx, "default", "j", logLines(1, 0, 1, 5)) })
	tests := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 2, []int64{1, 2}},
		{2, 2, []int64{3, 4}},
		{4, 2, []int64{5}},
		{5, 2, nil},
		{0, 0, []int64{1, 2, 3, 4, 5}},
		{3, 0, []int64{4, 5}},
		{100, 10, nil},
	}
	view(t, s, func(tx store.Tx) error {
		for _, tt := range tests {
			ls, err := tx.ReadLog(ctx, "default", "j", tt.after, tt.limit)
			if err != nil {
				t.Fatalf("ReadLog(after %d, limit %d): %v", tt.after, tt.limit, err)
			}
			if got := seqs(ls); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadLog(after %d, limit %d) seqs = %v, want %v", tt.after, tt.limit, got, tt.want)
			}
		}
		ls, err := tx.ReadLog(ctx, "default", "missing", 0, 10)
		if err != nil || len(ls) != 0 {
			t.Errorf("ReadLog of a job without lines = %v, %v; want none", ls, err)
		}
		return nil
	})
}

// testConcurrentAppendLog appends from several goroutines at once, as the
// agents of a multi-node job do: the seqs must stay dense and unique.
func testConcurrentAppendLog(t *testing.T, open Opener) {
	s := openStore(t, open)
	const writers, batches, perBatch = 6, 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				from := int64(b*perBatch + 1)
				lines := logLines(1, w, from, from+perBatch-1)
				err := s.Update(t.Context(), func(tx store.Tx) error {
					// The batch is copied because fn may run more than once.
					return tx.AppendLog(t.Context(), "default", "j", append([]api.LogLine(nil), lines...))
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
		t.Fatalf("concurrent append: %v", err)
	}
	view(t, s, func(tx store.Tx) error {
		ls, err := tx.ReadLog(t.Context(), "default", "j", 0, 0)
		if err != nil {
			t.Fatalf("read log: %v", err)
		}
		if len(ls) != writers*batches*perBatch {
			t.Fatalf("stored %d lines, want %d", len(ls), writers*batches*perBatch)
		}
		next := map[int]int64{}
		for i, l := range ls {
			if l.Seq != int64(i+1) {
				t.Fatalf("line %d has seq %d: seqs are not dense", i+1, l.Seq)
			}
			// Each node's lines keep their own order.
			if l.NodeSeq != next[l.Node]+1 {
				t.Fatalf("node %d: node_seq %d after %d", l.Node, l.NodeSeq, next[l.Node])
			}
			next[l.Node] = l.NodeSeq
		}
		return nil
	})
}

func testEvents(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	var added []*api.Event
	update(t, s, func(tx store.Tx) error {
		for i, r := range []string{"compute/cpu", "compute/cpu", "job/j1", "compute/cpu"} {
			e := &api.Event{Time: when(i), Kind: "Scaled", Message: fmt.Sprintf("event %d", i)}
			if err := tx.AddEvent(ctx, "default", r, e); err != nil {
				return err
			}
			added = append(added, e)
		}
		return tx.AddEvent(ctx, "other", "compute/cpu", &api.Event{Time: when(9), Kind: "Created", Message: "elsewhere"})
	})
	if got := []int64{added[0].Seq, added[1].Seq, added[2].Seq, added[3].Seq}; !reflect.DeepEqual(got, []int64{1, 2, 1, 3}) {
		t.Errorf("event seqs = %v, want [1 2 1 3] (dense per resource)", got)
	}
	update(t, s, func(tx store.Tx) error {
		e := &api.Event{Time: when(10), Kind: "Deleted", Message: "later"}
		if err := tx.AddEvent(ctx, "default", "compute/cpu", e); err != nil {
			return err
		}
		if e.Seq != 4 {
			t.Errorf("seq of an event in a later transaction = %d, want 4", e.Seq)
		}
		return nil
	})
	tests := []struct {
		ws, resource string
		after        int64
		limit        int
		want         []string
	}{
		{"default", "compute/cpu", 0, 0, []string{"event 0", "event 1", "event 3", "later"}},
		{"default", "compute/cpu", 1, 2, []string{"event 1", "event 3"}},
		{"default", "compute/cpu", 4, 0, nil},
		{"default", "job/j1", 0, 10, []string{"event 2"}},
		{"other", "compute/cpu", 0, 0, []string{"elsewhere"}},
		{"default", "job/none", 0, 0, nil},
	}
	view(t, s, func(tx store.Tx) error {
		for _, tt := range tests {
			es, err := tx.ListEvents(ctx, tt.ws, tt.resource, tt.after, tt.limit)
			if err != nil {
				t.Fatalf("ListEvents: %v", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Message)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ListEvents(%s, %s, after %d, limit %d) = %v, want %v", tt.ws, tt.resource, tt.after, tt.limit, got, tt.want)
			}
		}
		es, err := tx.ListEvents(ctx, "default", "compute/cpu", 0, 1)
		if err != nil || len(es) != 1 {
			t.Fatalf("ListEvents limit 1 = %v, %v", es, err)
		}
		e := es[0]
		if e.Seq != 1 || e.Kind != "Scaled" {
			t.Errorf("first event = %+v, want seq 1 kind Scaled", e)
		}
		checkUTC(t, "event time", e.Time, when(0))
		return nil
	})
}
