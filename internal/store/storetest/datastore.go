package storetest

import (
	"reflect"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// testDatastores covers the datastore table: round trip in UTC, etags,
// listing per workspace in name order, a workspace that must exist, and
// deletion.
func testDatastores(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	putWorkspaces(t, s, "ws", "other")
	in := &api.Datastore{Name: "shared", Type: api.DatastoreLocal, Description: "team data", Path: "/srv/data",
		Tags: map[string]string{"team": "ml"}, Workspace: "ws", CreatedOn: when(1)}
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutDatastore(ctx, in, ""); err != nil {
			return err
		}
		for _, d := range []api.Datastore{{Name: "alpha", Workspace: "ws"}, {Name: "zeta", Workspace: "other"}} {
			d.Type, d.Path = api.DatastoreLocal, "/d"
			if err := tx.PutDatastore(ctx, &d, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if in.Etag == "" {
		t.Fatal("PutDatastore did not set the etag")
	}
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetDatastore(ctx, "ws", "shared")
		if err != nil {
			return err
		}
		checkUTC(t, "created_on", got.CreatedOn, in.CreatedOn)
		want := *in
		want.CreatedOn = got.CreatedOn
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("got %+v, want %+v", *got, want)
		}
		list, err := tx.ListDatastores(ctx, "ws")
		if err != nil {
			return err
		}
		if len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "shared" || list[1].Etag != in.Etag {
			t.Errorf("list = %+v", list)
		}
		_, err = tx.GetDatastore(ctx, "other", "shared")
		wantErr(t, "get in another workspace", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error {
		return tx.PutDatastore(ctx, &api.Datastore{Name: "shared", Workspace: "ws", Type: api.DatastoreLocal}, in.Etag+"0")
	})
	wantErr(t, "stale etag", err, store.ErrPrecondition)
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.PutDatastore(ctx, &api.Datastore{Name: "x", Workspace: "missing", Type: api.DatastoreLocal}, "")
	})
	wantErr(t, "missing workspace", err, store.ErrNotFound)
	update(t, s, func(tx store.Tx) error { return tx.DeleteDatastore(ctx, "ws", "shared") })
	err = s.Update(ctx, func(tx store.Tx) error { return tx.DeleteDatastore(ctx, "ws", "shared") })
	wantErr(t, "delete twice", err, store.ErrNotFound)
}
