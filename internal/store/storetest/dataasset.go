package storetest

import (
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func testDataAssets(t *testing.T, open Opener) {
	s := openStore(t, open)
	putWorkspaces(t, s, "ws1", "ws2")
	put := func(ws, name, version string) {
		t.Helper()
		update(t, s, func(tx store.Tx) error {
			d := &api.DataAsset{Workspace: ws, Name: name, Version: version, Type: "uri_folder",
				Path: "azureml://datastores/workspaceblobstore/paths/" + name + "/" + version, Tags: map[string]string{"team": "ml"}, CreatedOn: when(1)}
			if err := tx.PutDataAsset(t.Context(), d, ""); err != nil {
				return err
			}
			if d.Etag == "" {
				t.Errorf("PutDataAsset left Etag empty")
			}
			return nil
		})
	}
	put("ws1", "iris", "2")
	put("ws1", "iris", "10")
	put("ws1", "digits", "1")
	put("ws2", "iris", "1")
	view(t, s, func(tx store.Tx) error {
		d, err := tx.GetDataAsset(t.Context(), "ws1", "iris", "2")
		if err != nil {
			t.Fatalf("GetDataAsset: %v", err)
		}
		if d.Path != "azureml://datastores/workspaceblobstore/paths/iris/2" || d.Type != "uri_folder" || d.Tags["team"] != "ml" {
			t.Errorf("round trip lost fields: %+v", d)
		}
		checkUTC(t, "created_on", d.CreatedOn, when(1))
		_, err = tx.GetDataAsset(t.Context(), "ws1", "iris", "3")
		wantErr(t, "GetDataAsset of a missing version", err, store.ErrNotFound)
		all, err := tx.ListDataAssets(t.Context(), "ws1", "")
		if err != nil {
			t.Fatalf("ListDataAssets: %v", err)
		}
		if got := dataRefs(all); got != "digits:1 iris:2 iris:10" {
			t.Errorf("ListDataAssets(ws1) = %s, want by name, then creation order", got)
		}
		one, err := tx.ListDataAssets(t.Context(), "ws1", "iris")
		if err != nil {
			t.Fatalf("ListDataAssets: %v", err)
		}
		if got := dataRefs(one); got != "iris:2 iris:10" {
			t.Errorf("ListDataAssets(ws1, iris) = %s", got)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.DeleteDataAsset(t.Context(), "ws1", "iris", "10"); err != nil {
			t.Fatalf("DeleteDataAsset: %v", err)
		}
		wantErr(t, "deleting twice", tx.DeleteDataAsset(t.Context(), "ws1", "iris", "10"), store.ErrNotFound)
		wantErr(t, "data asset in a missing workspace",
			tx.PutDataAsset(t.Context(), &api.DataAsset{Workspace: "nope", Name: "x", Version: "1"}, ""), store.ErrNotFound)
		return nil
	})
	d := &api.DataAsset{Workspace: "ws1", Name: "etag", Version: "1", Path: "blob:00"}
	update(t, s, func(tx store.Tx) error { return tx.PutDataAsset(t.Context(), d, "") })
	first := d.Etag
	d.Archived = true
	update(t, s, func(tx store.Tx) error { return tx.PutDataAsset(t.Context(), d, first) })
	err := s.Update(t.Context(), func(tx store.Tx) error { return tx.PutDataAsset(t.Context(), d, first) })
	wantErr(t, "put with a stale etag", err, store.ErrPrecondition)
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetDataAsset(t.Context(), "ws1", "etag", "1")
		if err != nil || !got.Archived {
			t.Errorf("archived flag: %+v, %v", got, err)
		}
		return nil
	})
}

func dataRefs(ds []api.DataAsset) string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name+":"+d.Version)
	}
	return strings.Join(out, " ")
}
