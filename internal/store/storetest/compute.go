package storetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

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

// testComputeReadAgain: a transaction that reads a compute again sees its
// own writes of it (a put, a delete) and, after a savepoint that wrote it
// was rolled back, the compute as before that savepoint. (A store may keep
// what a transaction read, so a batch of submissions reads their compute
// once.)
func testComputeReadAgain(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "default")
	update(t, s, func(tx store.Tx) error { return tx.PutCompute(ctx, newCompute("default", "cpu"), "") })
	refused := errors.New("refused")
	update(t, s, func(tx store.Tx) error {
		max := func(want int) {
			t.Helper()
			c, err := tx.GetCompute(ctx, "default", "cpu")
			if err != nil || c.MaxInstances != want {
				t.Errorf("GetCompute: %v, %v; want max_instances %d", c, err, want)
			}
		}
		max(2)
		c, _ := tx.GetCompute(ctx, "default", "cpu")
		c.MaxInstances = 5
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		max(5)
		err := tx.Savepoint(ctx, func() error {
			c.MaxInstances = 7
			if err := tx.PutCompute(ctx, c, ""); err != nil {
				return err
			}
			max(7)
			return refused
		})
		if !errors.Is(err, refused) {
			return err
		}
		max(5)
		if err := tx.DeleteCompute(ctx, "default", "cpu"); err != nil {
			return err
		}
		if _, err := tx.GetCompute(ctx, "default", "cpu"); !store.IsNotFound(err) {
			t.Errorf("GetCompute after DeleteCompute: %v, want not found", err)
		}
		return nil
	})
}
