// Package storetest is the conformance suite every store backend passes. A
// backend's tests call Run with a function that creates an empty database,
// so SQLite and PostgreSQL are held to exactly the same behaviour (River's
// riverdrivertest is the model).
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
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// Opener opens the database under test. Every call opens the same database
// again, so a test can close a store and reopen it, or open two stores at
// once the way two server replicas do (so it must be safe to call from
// several goroutines).
type Opener func(ctx context.Context) (store.Store, error)

// Run runs the suite. newDB creates a new, empty database for one test and
// returns the Opener for it; the tests run in parallel, so newDB must be safe
// to call from several goroutines. Run closes every store it opens.
func Run(t *testing.T, newDB func(t *testing.T) Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"Workspaces", testWorkspaces},
		{"ComputeCRUD", testComputeCRUD},
		{"ComputeEtags", testComputeEtags},
		{"ComputeNeedsWorkspace", testComputeNeedsWorkspace},
		{"ListComputesAcrossWorkspaces", testListComputesAcrossWorkspaces},
		{"JobRoundTrip", testJobRoundTrip},
		{"JobEtags", testJobEtags},
		{"ListJobs", testListJobs},
		{"Datastores", testDatastores},
		{"Environments", testEnvironments},
		{"EnvironmentEtags", testEnvironmentEtags},
		{"Components", testComponents},
		{"DataAssets", testDataAssets},
		{"Metrics", testMetrics},
		{"Nodes", testNodes},
		{"Tokens", testTokens},
		{"Settings", testSettings},
		{"Objects", testObjects},
		{"Audit", testAudit},
		{"AppendLog", testAppendLog},
		{"ReadLogPaging", testReadLogPaging},
		{"ConcurrentAppendLog", testConcurrentAppendLog},
		{"Events", testEvents},
		{"Rollback", testRollback},
		{"OnCommit", testOnCommit},
		{"NodeUsage", testNodeUsage},
		{"Budgets", testBudgets},
		{"ComputeSamples", testComputeSamples},
		{"ViewIsReadOnly", testViewIsReadOnly},
		{"CanceledContext", testCanceledContext},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"Reopen", testReopen},
		{"ConcurrentOpen", testConcurrentOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newDB(t))
		})
	}
}

// openStore opens a store and closes it when the test ends.
func openStore(t *testing.T, open Opener) store.Store {
	t.Helper()
	s, err := open(t.Context())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing store: %v", err)
		}
	})
	return s
}

func update(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.Update(t.Context(), fn); err != nil {
		t.Fatalf("update: %v", err)
	}
}

func view(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.View(t.Context(), fn); err != nil {
		t.Fatalf("view: %v", err)
	}
}

// when is a time with microsecond precision in a zone other than UTC: the
// store must give it back equal, in UTC.
func when(minute int) time.Time {
	return time.Date(2025, 3, 1, 12, minute, 7, 123456000, time.FixedZone("CET", 3600))
}

func checkUTC(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
	if got.Location() != time.UTC {
		t.Errorf("%s location = %v, want UTC", what, got.Location())
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %q", what, err, target)
	}
}

func putWorkspaces(t *testing.T, s store.Store, names ...string) {
	t.Helper()
	update(t, s, func(tx store.Tx) error {
		for _, n := range names {
			if err := tx.PutWorkspace(t.Context(), &api.Workspace{Name: n, CreatedOn: when(0)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func newCompute(ws, name string) *api.Compute {
	return &api.Compute{
		Name: name, Type: api.ComputeTypeAmlCompute, Workspace: ws, Location: "local",
		Size: "STANDARD_D2_V3", Tier: api.TierDedicated, MaxInstances: 2,
		ProvisioningState: api.ProvisioningSucceeded, AllocationState: api.AllocationSteady,
		CreatedOn: when(1), ModifiedOn: when(2),
	}
}

func newJob(ws, name, compute, status string) *api.Job {
	return &api.Job{
		Name: name, Type: "command", Command: "echo hi", Compute: compute,
		Workspace: ws, Status: status, CreatedOn: when(3),
	}
}

func testWorkspaces(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetWorkspace(ctx, "default")
		wantErr(t, "get missing workspace", err, store.ErrNotFound)
		ws, err := tx.ListWorkspaces(ctx)
		if err != nil || len(ws) != 0 {
			t.Errorf("ListWorkspaces on empty store = %v, %v; want none", ws, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		for _, n := range []string{"zeta", "default", "alpha"} {
			if err := tx.PutWorkspace(ctx, &api.Workspace{Name: n, Description: "first", CreatedOn: when(0)}); err != nil {
				return err
			}
		}
		// Put replaces.
		return tx.PutWorkspace(ctx, &api.Workspace{Name: "default", Description: "second", CreatedOn: when(0)})
	})
	view(t, s, func(tx store.Tx) error {
		w, err := tx.GetWorkspace(ctx, "default")
		if err != nil {
			t.Fatalf("get workspace: %v", err)
		}
		if w.Name != "default" || w.Description != "second" {
			t.Errorf("workspace = %+v, want the replaced one", w)
		}
		checkUTC(t, "created_on", w.CreatedOn, when(0))
		ws, err := tx.ListWorkspaces(ctx)
		if err != nil {
			t.Fatalf("list workspaces: %v", err)
		}
		var names []string
		for _, w := range ws {
			names = append(names, w.Name)
		}
		if want := []string{"alpha", "default", "zeta"}; !reflect.DeepEqual(names, want) {
			t.Errorf("ListWorkspaces names = %v, want %v", names, want)
		}
		return nil
	})
}

func testComputeCRUD(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default", "other")

	yes := true
	full := newCompute("default", "gpu")
	full.Description = "training"
	full.Tags = map[string]string{"team": "ml"}
	full.MinInstances, full.MaxInstances, full.IdleTimeBeforeScaleDown = 1, 4, 120
	full.SSHPublicAccessEnabled = &yes
	full.SSHSettings = &api.SSHSettings{AdminUsername: "azureuser", AdminPassword: "secret", SSHKeyValue: "ssh-ed25519 AAAA"}
	full.NetworkSettings = &api.NetworkSettings{VnetName: "v", Subnet: "s"}
	full.Identity = &api.Identity{Type: "user_assigned", UserAssignedIdentities: []api.IdentityResource{{ResourceID: "id1"}}}
	full.ID = "/workspaces/default/computes/gpu"
	full.CurrentNodeCount, full.TargetNodeCount = 1, 2
	full.NodeStateCounts = api.NodeStateCounts{Idle: 1, Preparing: 1}
	full.Errors = []api.ErrorDetail{{Code: "E", Message: "m", Time: when(4)}}

	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetCompute(ctx, "default", "gpu")
		wantErr(t, "get missing compute", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteCompute(ctx, "default", "gpu") })
	wantErr(t, "delete missing compute", err, store.ErrNotFound)
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutCompute(ctx, full, ""); err != nil {
			return err
		}
		if full.Etag == "" {
			t.Errorf("PutCompute left Etag empty")
		}
		// Same name in another workspace is another compute.
		return tx.PutCompute(ctx, newCompute("other", "gpu"), "")
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetCompute(ctx, "default", "gpu")
		if err != nil {
			t.Fatalf("get compute: %v", err)
		}
		checkUTC(t, "created_on", got.CreatedOn, full.CreatedOn)
		checkUTC(t, "modified_on", got.ModifiedOn, full.ModifiedOn)
		checkUTC(t, "errors[0].time", got.Errors[0].Time, full.Errors[0].Time)
		// Times compared above; compare the rest of the document exactly
		// (the store keeps secrets: redaction is the server's job).
		want := *full
		want.CreatedOn, want.ModifiedOn = got.CreatedOn, got.ModifiedOn
		want.Errors = []api.ErrorDetail{{Code: "E", Message: "m", Time: got.Errors[0].Time}}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("GetCompute =\n%+v\nwant\n%+v", *got, want)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		return tx.DeleteCompute(ctx, "default", "gpu")
	})
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetCompute(ctx, "default", "gpu")
		wantErr(t, "get deleted compute", err, store.ErrNotFound)
		if _, err := tx.GetCompute(ctx, "other", "gpu"); err != nil {
			t.Errorf("compute in the other workspace: %v", err)
		}
		return nil
	})
}

func testComputeEtags(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")

	c := newCompute("default", "cpu")
	update(t, s, func(tx store.Tx) error {
		err := tx.PutCompute(ctx, c, "1")
		wantErr(t, "put with ifMatch on a missing compute", err, store.ErrNotFound)
		return tx.PutCompute(ctx, c, "")
	})
	first := c.Etag
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetCompute(ctx, "default", "cpu")
		if err != nil {
			t.Fatalf("get compute: %v", err)
		}
		if got.Etag != first {
			t.Errorf("stored etag = %q, want the one Put set (%q)", got.Etag, first)
		}
		return nil
	})

	c.MaxInstances = 3
	update(t, s, func(tx store.Tx) error { return tx.PutCompute(ctx, c, first) })
	second := c.Etag
	if second == first {
		t.Fatalf("etag unchanged after a put: %q", second)
	}

	stale := newCompute("default", "cpu")
	stale.MaxInstances = 9
	err := s.Update(ctx, func(tx store.Tx) error { return tx.PutCompute(ctx, stale, first) })
	wantErr(t, "put with a stale etag", err, store.ErrPrecondition)
	if stale.Etag != "" {
		t.Errorf("failed put set Etag to %q", stale.Etag)
	}
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetCompute(ctx, "default", "cpu")
		if err != nil {
			t.Fatalf("get compute: %v", err)
		}
		if got.MaxInstances != 3 || got.Etag != second {
			t.Errorf("after a failed put: max_instances %d etag %q, want 3 and %q", got.MaxInstances, got.Etag, second)
		}
		return nil
	})

	// An etag is never reused, even by a compute deleted and created again,
	// so a client holding the old one cannot overwrite the new compute.
	update(t, s, func(tx store.Tx) error { return tx.DeleteCompute(ctx, "default", "cpu") })
	again := newCompute("default", "cpu")
	update(t, s, func(tx store.Tx) error { return tx.PutCompute(ctx, again, "") })
	if again.Etag == first || again.Etag == second {
		t.Errorf("recreated compute reused etag %q", again.Etag)
	}
	err = s.Update(ctx, func(tx store.Tx) error { return tx.PutCompute(ctx, newCompute("default", "cpu"), second) })
	wantErr(t, "put with the etag of a deleted compute", err, store.ErrPrecondition)
}

func testComputeNeedsWorkspace(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	err := s.Update(ctx, func(tx store.Tx) error { return tx.PutCompute(ctx, newCompute("nowhere", "cpu"), "") })
	wantErr(t, "put compute in a missing workspace", err, store.ErrNotFound)
	err = s.Update(ctx, func(tx store.Tx) error { return tx.PutJob(ctx, newJob("nowhere", "j", "cpu", api.JobQueued), "") })
	wantErr(t, "put job in a missing workspace", err, store.ErrNotFound)
}

func testListComputesAcrossWorkspaces(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "a", "b")
	update(t, s, func(tx store.Tx) error {
		for _, k := range [][2]string{{"b", "cpu"}, {"a", "gpu"}, {"a", "cpu"}, {"b", "big"}} {
			if err := tx.PutCompute(ctx, newCompute(k[0], k[1]), ""); err != nil {
				return err
			}
		}
		return nil
	})
	keys := func(cs []api.Compute) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Workspace+"/"+c.Name)
		}
		return out
	}
	tests := []struct {
		workspace string
		want      []string
	}{
		{"a", []string{"a/cpu", "a/gpu"}},
		{"b", []string{"b/big", "b/cpu"}},
		{"", []string{"b/big", "a/cpu", "b/cpu", "a/gpu"}},
		{"none", nil},
	}
	view(t, s, func(tx store.Tx) error {
		for _, tt := range tests {
			cs, err := tx.ListComputes(ctx, tt.workspace)
			if err != nil {
				t.Fatalf("ListComputes(%q): %v", tt.workspace, err)
			}
			if got := keys(cs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ListComputes(%q) = %v, want %v", tt.workspace, got, tt.want)
			}
			for _, c := range cs {
				if c.Etag == "" {
					t.Errorf("ListComputes(%q): %s has no etag", tt.workspace, c.Name)
				}
			}
		}
		return nil
	})
}

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
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetJob(ctx, "default", "j")
		if err != nil {
			t.Fatalf("get job: %v", err)
		}
		if got.Status != api.JobRunning {
			t.Errorf("status after a failed put = %s, want %s", got.Status, api.JobRunning)
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
		{"all workspaces", store.JobFilter{}, []string{"default/zeta", "default/alpha", "other/beta", "default/mid", "default/beta"}},
		{"compute", store.JobFilter{Workspace: "default", Compute: "cpu"}, []string{"zeta", "mid"}},
		{"compute across workspaces", store.JobFilter{Compute: "cpu"}, []string{"default/zeta", "other/beta", "default/mid"}},
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
		}
		return nil
	})
}

func testNodes(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	node := func(id, ws, compute string) *api.Node {
		return &api.Node{
			ID: id, Workspace: ws, Compute: compute, Location: "local", Provider: "local",
			State: api.NodeIdle, VCPUs: 2, MemoryGB: 7.5, CreatedOn: when(1), StateSince: when(2), LastHeartbeat: when(3),
		}
	}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetNode(ctx, "n1")
		wantErr(t, "get missing node", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteNode(ctx, "n1") })
	wantErr(t, "delete missing node", err, store.ErrNotFound)
	n1 := node("n1", "default", "cpu")
	update(t, s, func(tx store.Tx) error {
		for _, n := range []*api.Node{node("n3", "default", "cpu"), n1, node("n2", "default", "gpu"), node("n4", "other", "cpu")} {
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		n1.State, n1.Job = api.NodeRunning, "job-1"
		return tx.PutNode(ctx, n1)
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetNode(ctx, "n1")
		if err != nil {
			t.Fatalf("get node: %v", err)
		}
		checkUTC(t, "last_heartbeat", got.LastHeartbeat, n1.LastHeartbeat)
		want := *n1
		want.CreatedOn, want.StateSince, want.LastHeartbeat = got.CreatedOn, got.StateSince, got.LastHeartbeat
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("GetNode = %+v, want %+v", *got, want)
		}
		tests := []struct{ ws, compute, want string }{
			{"default", "cpu", "n1 n3"},
			{"default", "gpu", "n2"},
			{"other", "cpu", "n4"},
			{"default", "", "n1 n2 n3"},
			{"", "", "n1 n2 n3 n4"},
			{"default", "none", ""},
		}
		for _, tt := range tests {
			ns, err := tx.ListNodes(ctx, tt.ws, tt.compute)
			if err != nil {
				t.Fatalf("ListNodes(%q, %q): %v", tt.ws, tt.compute, err)
			}
			got := ""
			for i, n := range ns {
				if i > 0 {
					got += " "
				}
				got += n.ID
			}
			if got != tt.want {
				t.Errorf("ListNodes(%q, %q) = %q, want %q", tt.ws, tt.compute, got, tt.want)
			}
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteNode(ctx, "n1") })
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetNode(ctx, "n1")
		wantErr(t, "get deleted node", err, store.ErrNotFound)
		return nil
	})
}

func testTokens(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	admin := &store.Token{Hash: "aa", Name: "admin", Role: "admin"}
	agent := &store.Token{Hash: "bb", ID: "bb", Name: "ci", User: "ana", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Expires: time.Date(2026, 2, 2, 3, 4, 5, 0, time.UTC)}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetToken(ctx, "aa")
		wantErr(t, "get missing token", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteToken(ctx, "aa") })
	wantErr(t, "delete missing token", err, store.ErrNotFound)
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutToken(ctx, admin); err != nil {
			return err
		}
		return tx.PutToken(ctx, agent)
	})
	view(t, s, func(tx store.Tx) error {
		for _, want := range []*store.Token{admin, agent} {
			got, err := tx.GetToken(ctx, want.Hash)
			if err != nil {
				t.Fatalf("get token: %v", err)
			}
			if *got != *want {
				t.Errorf("GetToken(%q) = %+v, want %+v", want.Hash, *got, *want)
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		ts, err := tx.ListTokens(ctx)
		if err != nil || len(ts) != 2 || ts[0].Hash != "aa" || ts[1].User != "ana" {
			t.Errorf("ListTokens = %+v, %v; want aa and bb", ts, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteToken(ctx, "bb") })
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetToken(ctx, "bb")
		wantErr(t, "get deleted token", err, store.ErrNotFound)
		return nil
	})
}

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

// testNodeUsage: removed nodes' lives are kept per workspace and
// compute, listed oldest first, filtered by when they ended.
func testNodeUsage(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	rows := []store.NodeUsage{
		{Workspace: "default", Compute: "a", Node: "a-1", Started: when(0), Ended: when(10), PricePerHour: 0.5},
		{Workspace: "default", Compute: "b", Node: "b-1", Started: when(1), Ended: when(20), PricePerHour: 1.25},
		{Workspace: "default", Compute: "a", Node: "a-2", Started: when(5), Ended: when(30), PricePerHour: 0.5},
		{Workspace: "other", Compute: "a", Node: "x-1", Started: when(0), Ended: when(40), PricePerHour: 9},
	}
	update(t, s, func(tx store.Tx) error {
		for _, u := range rows {
			if err := tx.AddNodeUsage(ctx, u); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		all, err := tx.ListNodeUsage(ctx, "default", "", time.Time{})
		if err != nil {
			return err
		}
		if len(all) != 3 || all[0].Node != "a-1" || all[1].Node != "b-1" || all[2].Node != "a-2" {
			t.Errorf("all of default = %+v, want a-1, b-1, a-2", all)
		}
		checkUTC(t, "started", all[1].Started, when(1))
		checkUTC(t, "ended", all[1].Ended, when(20))
		if all[1].PricePerHour != 1.25 || all[1].Compute != "b" || all[1].Workspace != "default" {
			t.Errorf("b-1 = %+v", all[1])
		}
		a, err := tx.ListNodeUsage(ctx, "default", "a", when(15))
		if err != nil {
			return err
		}
		if len(a) != 1 || a[0].Node != "a-2" {
			t.Errorf("compute a ended after :15 = %+v, want a-2", a)
		}
		return nil
	})
}

// testBudgets: budgets round-trip with their alerts, per workspace, under
// the etag rules.
func testBudgets(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	b := &api.Budget{Name: "gpu", Workspace: "default", Scope: api.BudgetScope{Compute: "c"}, Amount: 5, Period: api.BudgetMonthly,
		Thresholds: []float64{50, 100}, Actions: api.BudgetActions{Webhook: "http://127.0.0.1:9/x", Pause: true},
		Alerts: []api.BudgetAlert{{Budget: "gpu", Threshold: 50, PeriodStart: when(0), Time: when(1), Spent: 2.5}}}
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		return tx.PutBudget(ctx, b, "")
	})
	first := b.Etag
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetBudget(ctx, "default", "gpu")
		if err != nil {
			return err
		}
		if got.Etag != first || got.Scope.Compute != "c" || len(got.Alerts) != 1 || !got.Alerts[0].PeriodStart.Equal(when(0)) || !got.Actions.Pause {
			t.Errorf("budget = %+v", got)
		}
		_, err = tx.GetBudget(ctx, "default", "none")
		wantErr(t, "missing budget", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.PutBudget(ctx, b, first+"0") })
	wantErr(t, "stale etag", err, store.ErrPrecondition)
	update(t, s, func(tx store.Tx) error { return tx.DeleteBudget(ctx, "default", "gpu") })
	view(t, s, func(tx store.Tx) error {
		bs, err := tx.ListBudgets(ctx, "default")
		if err != nil || len(bs) != 0 {
			t.Errorf("after delete: %+v, %v", bs, err)
		}
		return nil
	})
}

// testComputeSamples: samples are kept per compute and time (a second
// write at a time replaces the first), listed oldest first since a time,
// and pruned by age.
func testComputeSamples(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	update(t, s, func(tx store.Tx) error {
		for i, m := range []int{0, 1, 2, 2} {
			smp := api.ComputeSample{Time: when(m).UTC(), Nodes: api.NodeStateCounts{Idle: i}, Queued: i}
			if err := tx.AddComputeSample(ctx, "default", "gpu", smp); err != nil {
				return err
			}
		}
		return tx.AddComputeSample(ctx, "default", "cpu", api.ComputeSample{Time: when(1).UTC(), Running: 7})
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.ListComputeSamples(ctx, "default", "gpu", when(1))
		if err != nil {
			return err
		}
		if len(got) != 2 || got[0].Queued != 1 || got[1].Queued != 3 || !got[1].Time.Equal(when(2)) {
			t.Errorf("gpu samples since :01 = %+v, want :01 (1) and :02 (replaced: 3)", got)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.PruneComputeSamples(ctx, when(2)) })
	view(t, s, func(tx store.Tx) error {
		gpu, err := tx.ListComputeSamples(ctx, "default", "gpu", time.Time{})
		if err != nil {
			return err
		}
		cpu, err := tx.ListComputeSamples(ctx, "default", "cpu", time.Time{})
		if err != nil {
			return err
		}
		if len(gpu) != 1 || len(cpu) != 0 {
			t.Errorf("after pruning before :02: gpu %+v, cpu %+v", gpu, cpu)
		}
		return nil
	})
}

func testSettings(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetSetting(ctx, "admin_token_created")
		wantErr(t, "get missing setting", err, store.ErrNotFound)
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutSetting(ctx, "admin_token_created", "yes"); err != nil {
			return err
		}
		if err := tx.PutSetting(ctx, "empty", ""); err != nil {
			return err
		}
		return tx.PutSetting(ctx, "admin_token_created", "twice")
	})
	view(t, s, func(tx store.Tx) error {
		for key, want := range map[string]string{"admin_token_created": "twice", "empty": ""} {
			v, err := tx.GetSetting(ctx, key)
			if err != nil || v != want {
				t.Errorf("GetSetting(%q) = %q, %v; want %q", key, v, err, want)
			}
		}
		return nil
	})
}

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
