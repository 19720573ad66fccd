package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// TestQueueMatchesPlace checks that Queue.Place decides exactly what Place
// decides, on thousands of random inputs, and keeps doing so while jobs
// arrive, run and leave: the same assignments, and for every waiting job
// the same reason, need, free count and head, whether it is listed in
// Waiting or stood for by a Rest.
func TestQueueMatchesPlace(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 3))
		queue, nodes, limits := randomInput(r)
		q := NewQueue()
		for _, j := range queue {
			q.Add(j)
		}
		for step := range 5 {
			compareQueue(t, fmt.Sprintf("seed %d step %d", seed, step), q, queue, nodes, limits)
			// Start what Place assigned, finish some running jobs, queue
			// new ones.
			placed := Place(queue, nodes, limits)
			busy := map[string]string{}
			for _, a := range placed.Assignments {
				q.Remove(a.Job)
				for _, id := range a.Nodes {
					busy[id] = a.Job
				}
			}
			queue = slices.DeleteFunc(queue, func(j Job) bool { _, ok := q.Job(j.Key); return !ok })
			for i := range nodes {
				n := &nodes[i]
				switch {
				case busy[n.ID] != "":
					n.State, n.Job = api.NodeRunning, busy[n.ID]
				case n.State == api.NodeRunning && r.IntN(2) == 0:
					n.State, n.Job = api.NodeIdle, ""
				case n.State == api.NodePreparing && r.IntN(3) == 0:
					n.State = api.NodeIdle
				}
			}
			for i := range r.IntN(6) {
				j := Job{Key: fmt.Sprintf("s%d-%d", step, i), Compute: fmt.Sprintf("c%d", r.IntN(3)),
					Instances: 1 + r.IntN(3), Priority: r.IntN(3), Seq: int64(20 + step)}
				queue = append(queue, j)
				q.Add(j)
			}
		}
	}
}

// compareQueue fails t unless q.Place and Place agree on queue and nodes.
func compareQueue(t *testing.T, at string, q *Queue, queue []Job, nodes []Node, limits map[string]int) {
	t.Helper()
	if q.Len() != len(queue) {
		t.Fatalf("%s: queue holds %d jobs, want %d", at, q.Len(), len(queue))
	}
	want := Place(queue, nodes, limits)
	got, rests := q.Place(nodes, limits)
	wantA, wantW := describe(want)
	slices.Sort(wantA)
	gotA, _ := describe(got)
	slices.Sort(gotA)
	if !slices.Equal(gotA, wantA) {
		t.Fatalf("%s: assignments\n got %v\nwant %v", at, gotA, wantA)
	}
	waits := map[string]Waiting{}
	for _, w := range got.Waiting {
		waits[w.Job] = w
	}
	rest := map[string]Rest{}
	for _, r := range rests {
		rest[r.Compute] = r
	}
	stood := map[string]int{}
	standsFor := map[string][]string{}
	for _, w := range want.Waiting {
		g, ok := waits[w.Job]
		if !ok {
			r, ok := rest[w.Compute]
			if !ok {
				t.Fatalf("%s: job %s neither visited nor stood for by a Rest", at, w.Job)
			}
			j, _ := q.Job(w.Job)
			g = r.Wait(j)
			stood[w.Compute]++
			standsFor[w.Compute] = append(standsFor[w.Compute], w.Job)
		}
		if g != w {
			t.Fatalf("%s: job %s waits as %+v, want %+v (waiting %v)", at, w.Job, g, w, strings.Join(wantW, " "))
		}
	}
	for _, r := range rests {
		if stood[r.Compute] != r.Jobs {
			t.Fatalf("%s: rest of %s stands for %d jobs, want %d", at, r.Compute, r.Jobs, stood[r.Compute])
		}
		var unvisited []string
		for j := range q.Unvisited(r) {
			unvisited = append(unvisited, j.Key)
		}
		if !slices.Equal(unvisited, standsFor[r.Compute]) {
			t.Fatalf("%s: Unvisited(rest of %s) = %v, want %v", at, r.Compute, unvisited, standsFor[r.Compute])
		}
	}
}

// TestQueueDemand checks the counted demand and the listing of jobs that
// can never fit.
func TestQueueDemand(t *testing.T) {
	q := NewQueue()
	for i, size := range []int{1, 1, 0, 8, 2, 1, 16} {
		q.Add(Job{Key: fmt.Sprintf("j%d", i), Compute: "c", Instances: size, Seq: int64(i)})
	}
	q.Add(Job{Key: "j1", Compute: "c", Instances: 2, Seq: 1}) // replaces
	q.Add(Job{Key: "other", Compute: "d", Instances: 1})
	fit, over := q.Demand("c", 8)
	if want := []SizeCount{{1, 3}, {2, 2}, {8, 1}}; !slices.Equal(fit, want) {
		t.Errorf("fit = %v, want %v", fit, want)
	}
	if len(over) != 1 || over[0].Key != "j6" {
		t.Errorf("over = %v, want j6", over)
	}
	if n := q.Count("c"); n != 7 {
		t.Errorf("Count(c) = %d, want 7", n)
	}
	var keys []string
	for j := range q.Jobs("c") {
		keys = append(keys, j.Key)
	}
	if want := []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6"}; !slices.Equal(keys, want) {
		t.Errorf("Jobs(c) = %v, want %v", keys, want)
	}
	if fit, over := q.Demand("c", -1); len(fit) != 4 || over != nil {
		t.Errorf("unlimited: fit %v over %v", fit, over)
	}
	if !q.Remove("j6") || q.Remove("j6") || q.Len() != 7 {
		t.Errorf("Remove: len %d", q.Len())
	}
	if _, over := q.Demand("c", 8); over != nil {
		t.Errorf("over after removal = %v", over)
	}
}
