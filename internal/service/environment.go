package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// PutEnvironment registers a version of an environment. Versions are
// immutable: putting the same content again (description and tags may
// change) succeeds, different content under an existing version is a
// conflict. An empty version becomes the next integer after the name's
// highest numeric version ("1" for a new name), as Azure's CLI does.
func (s *Service) PutEnvironment(ctx context.Context, ws string, e *api.Environment) (*api.Environment, bool, error) {
	if err := spec.ValidateEnvironment(e); err != nil {
		return nil, false, validation(err)
	}
	if e.Build != nil {
		// The context was uploaded (tide environment create does it).
		if err := s.checkSnapshot(ctx, e.Build.Path, "build.path", fieldError); err != nil {
			return nil, false, err
		}
	}
	created := false
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		created = false
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		versions, err := tx.ListEnvironments(ctx, ws, e.Name)
		if err != nil {
			return err
		}
		if e.Version == "" {
			e.Version = nextVersion(versions, envVersion)
		}
		e.Workspace, e.Etag = ws, ""
		var old *api.Environment
		for i := range versions {
			if versions[i].Version == e.Version {
				old = &versions[i]
			}
		}
		if old == nil {
			created = true
			e.CreatedOn = s.now()
			return tx.PutEnvironment(ctx, e, "")
		}
		if old.Image != e.Image || old.CondaFile != e.CondaFile || !reflect.DeepEqual(old.Tide, e.Tide) {
			ce := errorf(409, api.CodeConflict, "version: environment %s:%s already exists with other content, and versions are immutable; create version %s (or omit version to get it)", e.Name, e.Version, nextVersion(versions, envVersion))
			ce.Field = "version"
			return ce
		}
		e.CreatedOn = old.CreatedOn
		return tx.PutEnvironment(ctx, e, old.Etag)
	})
	if err != nil {
		return nil, false, s.mapStoreErr(err, "environment", e.Name)
	}
	return e, created, nil
}

func envVersion(e *api.Environment) string { return e.Version }

// Environment returns one version of an environment; version "latest" (or
// empty) is the most recently created one.
func (s *Service) Environment(ctx context.Context, ws, name, version string) (*api.Environment, error) {
	return inWorkspace(ctx, s, ws, func(tx store.Tx) (*api.Environment, error) { return s.environment(ctx, tx, ws, name, version) })
}

func (s *Service) environment(ctx context.Context, tx store.Tx, ws, name, version string) (*api.Environment, error) {
	hint := "run 'tide environment list' to see the environments of workspace " + ws
	return findVersion(ctx, ws, name, version, "environment", hint, tx.ListEnvironments, tx.GetEnvironment)
}

// Environments lists a workspace's environments (every version), or the
// versions of one name.
func (s *Service) Environments(ctx context.Context, ws, name string) ([]api.Environment, error) {
	out, err := inWorkspace(ctx, s, ws, func(tx store.Tx) ([]api.Environment, error) { return tx.ListEnvironments(ctx, ws, name) })
	if out == nil {
		out = []api.Environment{}
	}
	return out, err
}

// DeleteEnvironment deletes one version of an environment. Jobs that
// already use it keep their copy (api.Job.ResolvedEnvironment).
func (s *Service) DeleteEnvironment(ctx context.Context, ws, name, version string) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		e, err := s.environment(ctx, tx, ws, name, version)
		if err != nil {
			return err
		}
		return tx.DeleteEnvironment(ctx, ws, e.Name, e.Version)
	})
}

// resolveEnvironment finds the registered environment a job's reference
// names: in the workspace first, then through the server's environments
// mapping (Azure's curated names to local environments). It fails with
// how to register or map the name.
func (s *Service) resolveEnvironment(ctx context.Context, tx store.Tx, ws string, j *api.Job) error {
	j.ResolvedEnvironment = nil
	if j.Environment == nil || j.Environment.Ref == "" {
		return nil
	}
	ref, err := spec.ParseEnvironmentRef(j.Environment.Ref)
	if err != nil {
		return validation(err)
	}
	e, err := s.environment(ctx, tx, ws, ref.Name, ref.Version)
	if err == nil {
		j.ResolvedEnvironment = e
		return nil
	}
	if !isNotFound(err) {
		return err
	}
	if target, ok := s.Config.Environments[ref.Name]; ok {
		mapped, merr := spec.ParseEnvironmentRef(target)
		if merr != nil {
			return fmt.Errorf("server config environments.%s: %w", ref.Name, merr)
		}
		e, err := s.environment(ctx, tx, ws, mapped.Name, mapped.Version)
		if err == nil {
			j.ResolvedEnvironment = e
			return nil
		}
		if !isNotFound(err) {
			return err
		}
		ue := errorf(400, api.CodeValidation, "environment: %s is mapped to %s by the server config, which is not registered in workspace %s; register it with 'tide environment create -f env.yml' (name: %s)", ref, mapped, ws, mapped.Name)
		ue.Field = "environment"
		return ue
	}
	known := s.environmentNames(ctx, tx, ws)
	msg := fmt.Sprintf("environment: %s is not registered in workspace %s; register it with 'tide environment create -f env.yml' (name: %s", ref, ws, ref.Name)
	if ref.Version != spec.LatestVersion {
		msg += ", version: " + ref.Version
	}
	msg += ")"
	if ref.Curated {
		msg += fmt.Sprintf(", or map the Azure curated name to a local environment in the server config (environments: {%s: NAME@latest})", ref.Name)
	}
	if len(known) > 0 {
		msg += "; registered: " + strings.Join(known, ", ")
	}
	ue := errorf(400, api.CodeValidation, "%s", msg)
	ue.Field = "environment"
	return ue
}

func (s *Service) environmentNames(ctx context.Context, tx store.Tx, ws string) []string {
	envs, err := tx.ListEnvironments(ctx, ws, "")
	if err != nil {
		return nil
	}
	seen := map[string]string{}
	for _, e := range envs {
		seen[e.Name] = e.Name + ":" + e.Version
	}
	out := slices.Collect(maps.Values(seen))
	sort.Strings(out)
	return out
}

func isNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == api.CodeNotFound
}
