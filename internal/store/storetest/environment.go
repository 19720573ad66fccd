package storetest

import (
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func testEnvironments(t *testing.T, open Opener) {
	s := openStore(t, open)
	putWorkspaces(t, s, "ws1", "ws2")
	put := func(ws, name, version string) {
		t.Helper()
		update(t, s, func(tx store.Tx) error {
			e := &api.Environment{Workspace: ws, Name: name, Version: version, Image: "python:3.11", CreatedOn: when(1),
				Tide: &api.EnvironmentHost{Python: "/usr/bin/python3", Path: []string{"/opt/bin"}, Variables: map[string]string{"A": "1"}}}
			if err := tx.PutEnvironment(t.Context(), e, ""); err != nil {
				return err
			}
			if e.Etag == "" {
				t.Errorf("PutEnvironment left Etag empty")
			}
			return nil
		})
	}
	// Versions are created out of lexical order: the list keeps creation order.
	put("ws1", "sklearn", "2")
	put("ws1", "sklearn", "10")
	put("ws1", "torch", "1")
	put("ws2", "sklearn", "1")
	update(t, s, func(tx store.Tx) error {
		// Replacing a version keeps its place in the creation order.
		e, err := tx.GetEnvironment(t.Context(), "ws1", "sklearn", "2")
		if err != nil {
			return err
		}
		e.Description = "updated"
		return tx.PutEnvironment(t.Context(), e, e.Etag)
	})
	view(t, s, func(tx store.Tx) error {
		e, err := tx.GetEnvironment(t.Context(), "ws1", "sklearn", "2")
		if err != nil {
			t.Fatalf("GetEnvironment: %v", err)
		}
		if e.Description != "updated" || e.Tide == nil || e.Tide.Python != "/usr/bin/python3" || e.Tide.Variables["A"] != "1" || e.Image != "python:3.11" {
			t.Errorf("round trip lost fields: %+v", e)
		}
		checkUTC(t, "created_on", e.CreatedOn, when(1))
		_, err = tx.GetEnvironment(t.Context(), "ws1", "sklearn", "3")
		wantErr(t, "GetEnvironment of a missing version", err, store.ErrNotFound)

		all, err := tx.ListEnvironments(t.Context(), "ws1", "")
		if err != nil {
			t.Fatalf("ListEnvironments: %v", err)
		}
		if got := refs(all); got != "sklearn:2 sklearn:10 torch:1" {
			t.Errorf("ListEnvironments(ws1) = %s, want by name, then creation order", got)
		}
		one, err := tx.ListEnvironments(t.Context(), "ws1", "sklearn")
		if err != nil {
			t.Fatalf("ListEnvironments: %v", err)
		}
		if got := refs(one); got != "sklearn:2 sklearn:10" {
			t.Errorf("ListEnvironments(ws1, sklearn) = %s", got)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.DeleteEnvironment(t.Context(), "ws1", "sklearn", "10"); err != nil {
			t.Fatalf("DeleteEnvironment: %v", err)
		}
		wantErr(t, "deleting twice", tx.DeleteEnvironment(t.Context(), "ws1", "sklearn", "10"), store.ErrNotFound)
		wantErr(t, "environment in a missing workspace",
			tx.PutEnvironment(t.Context(), &api.Environment{Workspace: "nope", Name: "x", Version: "1"}, ""), store.ErrNotFound)
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		left, err := tx.ListEnvironments(t.Context(), "ws2", "")
		if err != nil {
			t.Fatalf("ListEnvironments: %v", err)
		}
		if got := refs(left); got != "sklearn:1" {
			t.Errorf("ListEnvironments(ws2) = %s", got)
		}
		return nil
	})
}

func testEnvironmentEtags(t *testing.T, open Opener) {
	s := openStore(t, open)
	putWorkspaces(t, s, "ws1")
	e := &api.Environment{Workspace: "ws1", Name: "env", Version: "1", Image: "python"}
	update(t, s, func(tx store.Tx) error { return tx.PutEnvironment(t.Context(), e, "") })
	first := e.Etag
	update(t, s, func(tx store.Tx) error { return tx.PutEnvironment(t.Context(), e, first) })
	err := s.Update(t.Context(), func(tx store.Tx) error { return tx.PutEnvironment(t.Context(), e, first) })
	wantErr(t, "put with a stale etag", err, store.ErrPrecondition)
	other := &api.Environment{Workspace: "ws1", Name: "env", Version: "2", Image: "python"}
	err = s.Update(t.Context(), func(tx store.Tx) error { return tx.PutEnvironment(t.Context(), other, "1") })
	wantErr(t, "put of a missing version with an etag", err, store.ErrNotFound)
}

func refs(envs []api.Environment) string {
	out := ""
	for i, e := range envs {
		if i > 0 {
			out += " "
		}
		out += e.Name + ":" + e.Version
	}
	return out
}
