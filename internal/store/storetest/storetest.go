// Package storetest is the conformance suite every store backend passes. A
// backend's tests call Run with a function that creates an empty database,
// so SQLite and PostgreSQL are held to exactly the same behaviour (River's
// riverdrivertest is the model).
package storetest

import (
	"context"
	"errors"
	"reflect"
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
		{"ComputeReadAgain", testComputeReadAgain},
		{"ListComputesAcrossWorkspaces", testListComputesAcrossWorkspaces},
		{"ChangedComputes", testChangedComputes},
		{"JobRoundTrip", testJobRoundTrip},
		{"JobEtags", testJobEtags},
		{"ListJobs", testListJobs},
		{"ChangedJobs", testChangedJobs},
		{"SetPendingReason", testSetPendingReason},
		{"BatchWrites", testBatchWrites},
		{"QueuePosition", testQueuePosition},
		{"QueuedJobs", testQueuedJobs},
		{"Datastores", testDatastores},
		{"Environments", testEnvironments},
		{"EnvironmentEtags", testEnvironmentEtags},
		{"Components", testComponents},
		{"DataAssets", testDataAssets},
		{"Metrics", testMetrics},
		{"Nodes", testNodes},
		{"ChangedNodes", testChangedNodes},
		{"ComputeUtilizations", testComputeUtilizations},
		{"ReleaseNode", testReleaseNode},
		{"Tokens", testTokens},
		{"Settings", testSettings},
		{"Objects", testObjects},
		{"Audit", testAudit},
		{"AppendLog", testAppendLog},
		{"ReadLogPaging", testReadLogPaging},
		{"ConcurrentAppendLog", testConcurrentAppendLog},
		{"Events", testEvents},
		{"PutJobEvents", testPutJobEvents},
		{"Rollback", testRollback},
		{"OnCommit", testOnCommit},
		{"Savepoint", testSavepoint},
		{"SavepointRevisions", testSavepointRevisions},
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
