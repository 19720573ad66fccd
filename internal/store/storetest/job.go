package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func testJobRoundTrip(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	code := 3
	j := newJob("default", "job-1", "cpu", api.JobFailed)
	j.DisplayName, j.ExperimentName = "first", "exp"
	j.Tags = map[string]string{"k": "v"}
	j.Environment = &api.JobEnvironment{Ref: "azureml:env@latest"}
	j.EnvironmentVariables = map[string]string{"A": "1"}
	j.Inputs = map[string]api.JobInput{
		"lr":   {Type: api.InputLiteral, Value: "0.01"},
		"data": {Type: api.InputURIFolder, Path: "./data", Mode: "ro_mount"},
	}
	j.Outputs = map[string]api.JobOutput{"model": {Type: "uri_folder"}}
	j.Resources = &api.JobResources{InstanceCount: 2}
	j.Distribution = &api.Distribution{Type: "pytorch", ProcessCountPerInstance: 2}
	j.Limits = &api.JobLimits{Timeout: 60}
	j.ID = "/workspaces/default/jobs/job-1"
	j.StartTime, j.EndTime = when(4), when(5)
	j.ExitCode = &code
	j.Error = "exit code 3"
	j.LogTail = []string{"a", "b"}
	j.Ranks = []api.JobRank{{Node: "n1", Status: api.JobFailed, ExitCode: &code, LastNodeSeq: 9}, {Node: "n2"}}
	j.Attempt = 1
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, "") })
	if j.Etag == "" {
		t.Fatalf("PutJob left Etag empty")
	}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetJob(ctx, "default", "missing")
		wantErr(t, "get missing job", err, store.ErrNotFound)
		got, err := tx.GetJob(ctx, "default", "job-1")
		if err != nil {
			t.Fatalf("get job: %v", err)
		}
		checkUTC(t, "created_on", got.CreatedOn, j.CreatedOn)
		checkUTC(t, "start_time", got.StartTime, j.StartTime)
		checkUTC(t, "end_time", got.EndTime, j.EndTime)
		want := *j
		want.CreatedOn, want.StartTime, want.EndTime = got.CreatedOn, got.StartTime, got.EndTime
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("GetJob =\n%+v\nwant\n%+v", *got, want)
		}
		return nil
	})
}

func testJobEtags(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	j := newJob("default", "j", "cpu", api.JobQueued)
	err := s.Update(ctx, func(tx store.Tx) error { return tx.PutJob(ctx, j, "7") })
	wantErr(t, "put job with ifMatch on a missing job", err, store.ErrNotFound)
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, "") })
	first := j.Etag
	j.Status = api.JobRunning
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, first) })
	if j.Etag == first {
		t.Fatalf("job etag unchanged after a put")
	}
	j.Status = api.JobCanceled
	err = s.Update(ctx, func(tx store.Tx) error { return tx.PutJob(ctx, j, first) })
	wantErr(t, "put job with a stale etag", err, store.ErrPrecondition)
	// A job in a missing workspace is refused, and the transaction goes
	// on: the job put after it is kept.
	other := newJob("default", "after", "cpu", api.JobQueued)
	update(t, s, func(tx store.Tx) error {
		err := tx.PutJob(ctx, newJob("nowhere", "j", "cpu", api.JobQueued), "")
		wantErr(t, "put job in a missing workspace", err, store.ErrNotFound)
		return tx.PutJob(ctx, other, "")
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetJob(ctx, "default", "j")
		if err != nil {
			t.Fatalf("get job: %v", err)
		}
		if got.Status != api.JobRunning {
			t.Errorf("status after a failed put = %s, want %s", got.Status, api.JobRunning)
		}
		if _, err := tx.GetJob(ctx, "default", "after"); err != nil {
			t.Errorf("the job put after a refused one: %v", err)
		}
		return nil
	})
}

func testListJobs(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default", "other")
	// Names are deliberately not in creation order.
	jobs := []*api.Job{
		newJob("default", "zeta", "cpu", api.JobQueued),
		newJob("default", "alpha", "gpu", api.JobRunning),
		newJob("other", "beta", "cpu", api.JobQueued),
		newJob("default", "mid", "cpu", api.JobCompleted),
		newJob("default", "beta", "gpu", api.JobQueued),
		newJob("other", "sl", api.ServerlessPrefix+"x1", api.JobQueued),
		// A job's Pods on attached Kubernetes compute cpu.
		newJob("other", "pods", api.JobComputePrefix("cpu")+"x2", api.JobQueued),
	}
	jobs[1].QueueSettings = &api.QueueSettings{Priority: "high"}
	jobs[4].QueueSettings = &api.QueueSettings{Priority: "750"}
	for _, j := range jobs {
		// One transaction each, so creation order is commit order.
		update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, "") })
	}
	// Updating a job keeps its place in the order.
	jobs[0].Status = api.JobRunning
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, jobs[0], jobs[0].Etag) })

	tests := []struct {
		name string
		f    store.JobFilter
		want []string
	}{
		{"workspace", store.JobFilter{Workspace: "default"}, []string{"zeta", "alpha", "mid", "beta"}},
		{"all workspaces", store.JobFilter{}, []string{"default/zeta", "default/alpha", "other/beta", "default/mid", "default/beta", "other/sl", "other/pods"}},
		{"serverless", store.JobFilter{Serverless: true}, []string{"other/sl"}},
		{"serverless of a workspace", store.JobFilter{Workspace: "default", Serverless: true}, nil},
		{"compute", store.JobFilter{Workspace: "default", Compute: "cpu"}, []string{"zeta", "mid"}},
		{"compute across workspaces", store.JobFilter{Compute: "cpu"}, []string{"default/zeta", "other/beta", "default/mid", "other/pods"}},
		{"an attached cluster's jobs", store.JobFilter{Workspace: "other", Compute: "cpu"}, []string{"beta", "pods"}},
		{"a compute named like a hidden one", store.JobFilter{Workspace: "other", Compute: "cp"}, nil},
		{"one status", store.JobFilter{Workspace: "default", Statuses: []string{api.JobQueued}}, []string{"beta"}},
		{"two statuses", store.JobFilter{Workspace: "default", Statuses: []string{api.JobRunning, api.JobCompleted}}, []string{"zeta", "alpha", "mid"}},
		{"status and compute", store.JobFilter{Workspace: "default", Compute: "gpu", Statuses: []string{api.JobQueued}}, []string{"beta"}},
		{"limit", store.JobFilter{Workspace: "default", Limit: 2}, []string{"zeta", "alpha"}},
		{"limit above count", store.JobFilter{Workspace: "default", Limit: 10}, []string{"zeta", "alpha", "mid", "beta"}},
		{"limit with filter", store.JobFilter{Statuses: []string{api.JobQueued}, Limit: 1}, []string{"other/beta"}},
		{"no match", store.JobFilter{Workspace: "default", Compute: "none"}, nil},
		{"keys", store.JobFilter{Keys: []store.JobKey{{Workspace: "default", Name: "beta"}, {Workspace: "other", Name: "beta"}, {Workspace: "default", Name: "zeta"}, {Workspace: "default", Name: "gone"}}},
			[]string{"default/zeta", "other/beta", "default/beta"}},
		{"keys and status", store.JobFilter{Workspace: "default", Statuses: []string{api.JobQueued}, Keys: []store.JobKey{{Workspace: "default", Name: "beta"}, {Workspace: "default", Name: "zeta"}}},
			[]string{"beta"}},
	}
	view(t, s, func(tx store.Tx) error {
		for _, tt := range tests {
			js, err := tx.ListJobs(ctx, tt.f)
			if err != nil {
				t.Fatalf("%s: ListJobs: %v", tt.name, err)
			}
			var got []string
			for _, j := range js {
				if tt.f.Workspace == "" {
					got = append(got, j.Workspace+"/"+j.Name)
				} else {
					got = append(got, j.Name)
				}
				if j.Etag == "" {
					t.Errorf("%s: job %s has no etag", tt.name, j.Name)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: ListJobs(%+v) = %v, want %v", tt.name, tt.f, got, tt.want)
			}
			// JobVersions selects the same jobs, with the same etags.
			vs, err := tx.JobVersions(ctx, tt.f)
			if err != nil {
				t.Fatalf("%s: JobVersions: %v", tt.name, err)
			}
			if len(vs) != len(js) {
				t.Fatalf("%s: JobVersions = %v, want %d jobs", tt.name, vs, len(js))
			}
			for i, v := range vs {
				if v.Workspace != js[i].Workspace || v.Name != js[i].Name || v.Etag != js[i].Etag ||
					v.Compute != js[i].Compute || v.Priority != js[i].Priority() {
					t.Errorf("%s: JobVersions[%d] = %+v, want %s/%s etag %s", tt.name, i, v, js[i].Workspace, js[i].Name, js[i].Etag)
				}
			}
			// ListJobDocs too, each document the job without its etag.
			ds, err := tx.ListJobDocs(ctx, tt.f)
			if err != nil {
				t.Fatalf("%s: ListJobDocs: %v", tt.name, err)
			}
			if len(ds) != len(js) {
				t.Fatalf("%s: ListJobDocs = %d jobs, want %d", tt.name, len(ds), len(js))
			}
			for i, d := range ds {
				var j api.Job
				if err := json.Unmarshal(d.Doc, &j); err != nil {
					t.Fatalf("%s: ListJobDocs[%d]: %v: %s", tt.name, i, err, d.Doc)
				}
				j.Etag = d.Etag
				if !reflect.DeepEqual(&j, &js[i]) || d.Name != j.Name || d.Compute != j.Compute || d.Status != j.Status || d.Priority != j.Priority() {
					t.Errorf("%s: ListJobDocs[%d] = %+v (%s), want %+v", tt.name, i, d, d.Doc, js[i])
				}
			}
		}
		// CountJobs counts what ListJobs lists, by workspace, compute
		// and status.
		for _, statuses := range [][]string{{api.JobQueued, api.JobRunning}, {api.JobCompleted}, {api.JobFailed}} {
			js, err := tx.ListJobs(ctx, store.JobFilter{Statuses: statuses})
			if err != nil {
				t.Fatalf("ListJobs(%v): %v", statuses, err)
			}
			want := map[[3]string]int{}
			for _, j := range js {
				want[[3]string{j.Workspace, j.Compute, j.Status}]++
			}
			got, err := tx.CountJobs(ctx, statuses)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("CountJobs(%v) = %v, %v; want %v", statuses, got, err, want)
			}
		}
		return nil
	})
}

// testQueuedJobs checks the count of queued jobs through every way a job
// enters or leaves the queue, and that rewriting a queued job keeps it.
func testQueuedJobs(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default", "other")
	want := func(step string, def, other int) {
		t.Helper()
		view(t, s, func(tx store.Tx) error {
			for ws, n := range map[string]int{"default": def, "other": other, "none": 0} {
				if got, err := tx.QueuedJobs(ctx, ws); err != nil || got != n {
					t.Errorf("%s: QueuedJobs(%s) = %d, %v; want %d", step, ws, got, err, n)
				}
			}
			return nil
		})
	}
	want("empty", 0, 0)
	a := newJob("default", "a", "cpu", api.JobQueued)
	b := newJob("default", "b", "cpu", api.JobQueued)
	c := newJob("other", "c", "cpu", api.JobQueued)
	d := newJob("default", "d", "cpu", api.JobCompleted)
	update(t, s, func(tx store.Tx) error {
		for _, j := range []*api.Job{a, b, c, d} {
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	want("submitted", 2, 1)
	a.PendingReason = "waiting for a node"
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, a, a.Etag) })
	want("a queued job rewritten", 2, 1)
	a.Status = api.JobPreparing
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, a, a.Etag) })
	want("a started", 1, 1)
	a.Status = api.JobQueued // requeued, as after a node failure
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, a, a.Etag) })
	want("a requeued", 2, 1)
	c.Status = api.JobCanceled
	etag := c.Etag
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutJob(ctx, c, c.Etag); err != nil {
			return err
		}
		return errors.New("rolled back")
	})
	if err == nil {
		t.Fatal("the rolled-back update succeeded")
	}
	want("a cancel rolled back", 2, 1)
	c.Etag = etag
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, c, c.Etag) })
	want("c canceled", 2, 0)
}

// testPutJobEvents checks the events PutJob records with a job: after
// the job's earlier events, in order, with their Seq set; none when the
// job is not written (another etag, no such workspace, a name taken with
// store.IfAbsent).
func testPutJobEvents(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	j := newJob("default", "j", "cpu", api.JobQueued)
	first := &api.Event{Time: when(1), Kind: "Queued", Message: "submitted"}
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, "", first) })
	update(t, s, func(tx store.Tx) error {
		return tx.AddEvent(ctx, "default", "job/j", &api.Event{Time: when(2), Kind: "Note", Message: "added alone"})
	})
	running := &api.Event{Time: when(3), Kind: "Running", Message: "started"}
	done := &api.Event{Time: when(4), Kind: "Completed", Message: "every node exited 0"}
	j.Status = api.JobCompleted
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, j, j.Etag, running, done) })
	if first.Seq != 1 || running.Seq != 3 || done.Seq != 4 {
		t.Errorf("seqs of the events put with the job = %d, %d, %d; want 1, 3, 4", first.Seq, running.Seq, done.Seq)
	}
	// Not written, nothing recorded.
	err := s.Update(ctx, func(tx store.Tx) error {
		return tx.PutJob(ctx, j, "12345", &api.Event{Time: when(5), Kind: "Lost", Message: "stale etag"})
	})
	wantErr(t, "PutJob with another etag", err, store.ErrPrecondition)
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.PutJob(ctx, newJob("nowhere", "j", "cpu", api.JobQueued), "", &api.Event{Time: when(5), Kind: "Lost", Message: "no workspace"})
	})
	wantErr(t, "PutJob in a missing workspace", err, store.ErrNotFound)
	// IfAbsent: a job of that name is stored, so nothing is written.
	taken := newJob("default", "j", "other", api.JobQueued)
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.PutJob(ctx, taken, store.IfAbsent, &api.Event{Time: when(5), Kind: "Lost", Message: "name taken"})
	})
	wantErr(t, "PutJob IfAbsent of a stored job", err, store.ErrExists)
	fresh := newJob("default", "k", "cpu", api.JobQueued)
	created := &api.Event{Time: when(6), Kind: "Queued", Message: "submitted"}
	update(t, s, func(tx store.Tx) error { return tx.PutJob(ctx, fresh, store.IfAbsent, created) })
	if fresh.Etag == "" || created.Seq != 1 {
		t.Errorf("PutJob IfAbsent of a new job: etag %q, event seq %d; want an etag and seq 1", fresh.Etag, created.Seq)
	}
	view(t, s, func(tx store.Tx) error {
		if got, err := tx.GetJob(ctx, "default", "j"); err != nil || got.Compute != "cpu" || got.Status != api.JobCompleted {
			t.Errorf("job j after a PutJob IfAbsent of its name: %+v, %v; want it unchanged", got, err)
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		es, err := tx.ListEvents(ctx, "default", "job/j", 0, 0)
		if err != nil {
			return err
		}
		var got []string
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d %s %s", e.Seq, e.Kind, e.Time.UTC().Format(time.RFC3339)))
		}
		at := func(m int) string { return when(m).UTC().Format(time.RFC3339) }
		want := []string{"1 Queued " + at(1), "2 Note " + at(2),
			"3 Running " + at(3), "4 Completed " + at(4)}
		if !slices.Equal(got, want) {
			t.Errorf("job events = %q, want %q", got, want)
		}
		es, err = tx.ListEvents(ctx, "nowhere", "job/j", 0, 0)
		if len(es) != 0 {
			t.Errorf("events of a job not written: %v", es)
		}
		return err
	})
}
