package service

import (
	"context"
	"reflect"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// PutComponent registers a version of a command component. Versions are
// immutable: putting the same content again (description, display name and
// tags may change) succeeds, different content under an existing version is
// a conflict. An empty version becomes the next integer after the name's
// highest numeric version ("1" for a new name).
func (s *Service) PutComponent(ctx context.Context, ws string, c *api.Component) (*api.Component, bool, error) {
	if c.Ref != "" {
		e := errorf(400, api.CodeValidation, "a component to register must be a component document, not the reference %q", c.Ref)
		return nil, false, e
	}
	if c.Name == "" {
		e := errorf(400, api.CodeValidation, "name: required to register a component")
		e.Field = "name"
		return nil, false, e
	}
	if c.Type == "" {
		c.Type = api.JobTypeCommand
	}
	if err := spec.ValidateComponent(c); err != nil {
		return nil, false, validation(err)
	}
	created := false
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		created = false
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		versions, err := tx.ListComponents(ctx, ws, c.Name)
		if err != nil {
			return err
		}
		if err := s.checkData(ctx, tx, ws, spec.ComponentJob(c)); err != nil {
			return err
		}
		if c.Version == "" {
			c.Version = nextVersion(versions, componentVersion)
		}
		c.Workspace, c.Etag = ws, ""
		var old *api.Component
		for i := range versions {
			if versions[i].Version == c.Version {
				old = &versions[i]
			}
		}
		if old == nil {
			created = true
			c.CreatedOn = s.now()
			return tx.PutComponent(ctx, c, "")
		}
		if !sameComponent(old, c) {
			ce := errorf(409, api.CodeConflict, "version: component %s:%s already exists with other content, and versions are immutable; create version %s (or omit version to get it)", c.Name, c.Version, nextVersion(versions, componentVersion))
			ce.Field = "version"
			return ce
		}
		c.CreatedOn = old.CreatedOn
		return tx.PutComponent(ctx, c, old.Etag)
	})
	if err != nil {
		return nil, false, s.mapStoreErr(err, "component", c.Name)
	}
	return c, created, nil
}

// sameComponent compares what a component runs, leaving out what may
// change on a registered version.
func sameComponent(a, b *api.Component) bool {
	strip := func(c api.Component) api.Component {
		c.DisplayName, c.Description, c.Tags = "", "", nil
		c.Workspace, c.CreatedOn, c.Etag = "", time.Time{}, ""
		return c
	}
	x, y := strip(*a), strip(*b)
	return reflect.DeepEqual(x, y)
}

func componentVersion(c *api.Component) string { return c.Version }

// Component returns one version of a component; version "latest" (or
// empty) is the most recently created one.
func (s *Service) Component(ctx context.Context, ws, name, version string) (*api.Component, error) {
	return inWorkspace(ctx, s, ws, func(tx store.Tx) (*api.Component, error) { return s.component(ctx, tx, ws, name, version) })
}

func (s *Service) component(ctx context.Context, tx store.Tx, ws, name, version string) (*api.Component, error) {
	hint := "run 'tide component list' to see the components of workspace " + ws + ", or register it with 'tide component create -f FILE'"
	return findVersion(ctx, ws, name, version, "component", hint, tx.ListComponents, tx.GetComponent)
}

// Components lists a workspace's components (every version), or the
// versions of one name.
func (s *Service) Components(ctx context.Context, ws, name string) ([]api.Component, error) {
	out, err := inWorkspace(ctx, s, ws, func(tx store.Tx) ([]api.Component, error) { return tx.ListComponents(ctx, ws, name) })
	if out == nil {
		out = []api.Component{}
	}
	return out, err
}

// DeleteComponent deletes one version of a component. Pipelines already
// submitted keep their copy.
func (s *Service) DeleteComponent(ctx context.Context, ws, name, version string) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		c, err := s.component(ctx, tx, ws, name, version)
		if err != nil {
			return err
		}
		return tx.DeleteComponent(ctx, ws, c.Name, c.Version)
	})
}
