package storetest

import (
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func testComponents(t *testing.T, open Opener) {
	s := openStore(t, open)
	putWorkspaces(t, s, "ws1", "ws2")
	def := "0.01"
	put := func(ws, name, version string) {
		t.Helper()
		update(t, s, func(tx store.Tx) error {
			c := &api.Component{Workspace: ws, Name: name, Version: version, Type: "command", Command: "python train.py --lr ${{inputs.lr}}",
				Code: "blob:0123", Inputs: map[string]api.ComponentInput{"lr": {Type: "number", Default: &def}},
				Outputs: map[string]api.JobOutput{"model": {Type: "uri_folder"}}, Environment: &api.JobEnvironment{Ref: "azureml:sklearn@latest"},
				CreatedOn: when(1)}
			if err := tx.PutComponent(t.Context(), c, ""); err != nil {
				return err
			}
			if c.Etag == "" {
				t.Errorf("PutComponent left Etag empty")
			}
			return nil
		})
	}
	put("ws1", "train", "2")
	put("ws1", "train", "10")
	put("ws1", "score", "1")
	put("ws2", "train", "1")
	view(t, s, func(tx store.Tx) error {
		c, err := tx.GetComponent(t.Context(), "ws1", "train", "2")
		if err != nil {
			t.Fatalf("GetComponent: %v", err)
		}
		if c.Inputs["lr"].Default == nil || *c.Inputs["lr"].Default != "0.01" || c.Environment == nil || c.Environment.Ref != "azureml:sklearn@latest" || c.Outputs["model"].Type != "uri_folder" {
			t.Errorf("round trip lost fields: %+v", c)
		}
		checkUTC(t, "created_on", c.CreatedOn, when(1))
		_, err = tx.GetComponent(t.Context(), "ws1", "train", "3")
		wantErr(t, "GetComponent of a missing version", err, store.ErrNotFound)
		all, err := tx.ListComponents(t.Context(), "ws1", "")
		if err != nil {
			t.Fatalf("ListComponents: %v", err)
		}
		if got := componentRefs(all); got != "score:1 train:2 train:10" {
			t.Errorf("ListComponents(ws1) = %s, want by name, then creation order", got)
		}
		one, err := tx.ListComponents(t.Context(), "ws1", "train")
		if err != nil {
			t.Fatalf("ListComponents: %v", err)
		}
		if got := componentRefs(one); got != "train:2 train:10" {
			t.Errorf("ListComponents(ws1, train) = %s", got)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.DeleteComponent(t.Context(), "ws1", "train", "10"); err != nil {
			t.Fatalf("DeleteComponent: %v", err)
		}
		wantErr(t, "deleting twice", tx.DeleteComponent(t.Context(), "ws1", "train", "10"), store.ErrNotFound)
		wantErr(t, "component in a missing workspace",
			tx.PutComponent(t.Context(), &api.Component{Workspace: "nope", Name: "x", Version: "1"}, ""), store.ErrNotFound)
		return nil
	})
	c := &api.Component{Workspace: "ws1", Name: "etag", Version: "1", Command: "true"}
	update(t, s, func(tx store.Tx) error { return tx.PutComponent(t.Context(), c, "") })
	first := c.Etag
	update(t, s, func(tx store.Tx) error { return tx.PutComponent(t.Context(), c, first) })
	err := s.Update(t.Context(), func(tx store.Tx) error { return tx.PutComponent(t.Context(), c, first) })
	wantErr(t, "put with a stale etag", err, store.ErrPrecondition)
}

func componentRefs(cs []api.Component) string {
	out := ""
	for i, c := range cs {
		if i > 0 {
			out += " "
		}
		out += c.Name + ":" + c.Version
	}
	return out
}
