package service

import (
	"context"
	"errors"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// ParseDataAsset parses a data asset document (YAML or JSON) from a request body.
func (s *Service) ParseDataAsset(body []byte) (*api.DataAsset, error) {
	a, err := spec.ParseDataAsset("request body", body, nil)
	if err != nil {
		return nil, validation(err)
	}
	return a, nil
}

// CreateDataAsset registers a version of a data asset. Versions are
// immutable: an existing version is refused. An empty version gets the
// next number. The path is checked and normalised as a job input's is
// (an uploaded snapshot, a datastore that exists, a wasbs:// URL matched
// to its datastore).
func (s *Service) CreateDataAsset(ctx context.Context, ws string, a *api.DataAsset) (*api.DataAsset, error) {
	if err := spec.ValidateDataAsset(a); err != nil {
		return nil, validation(err)
	}
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		versions, err := tx.ListDataAssets(ctx, ws, a.Name)
		if err != nil {
			return err
		}
		if a.Version == "" {
			a.Version = nextVersion(versions, func(v *api.DataAsset) string { return v.Version })
		}
		for _, v := range versions {
			if v.Version == a.Version {
				e := errorf(409, api.CodeConflict, "version: data asset %s:%s already exists and versions are immutable; leave version out to get the next one, or choose another", a.Name, a.Version)
				e.Field = "version"
				return e
			}
		}
		inType := a.Type
		if inType == api.DataMLTable {
			inType = api.InputURIFolder
		}
		probe := &api.Job{Inputs: map[string]api.JobInput{"path": {Type: inType, Path: a.Path}}}
		if err := s.checkData(ctx, tx, ws, probe); err != nil {
			var e *Error
			if errors.As(err, &e) && strings.HasPrefix(e.Msg, "inputs.path.path: ") {
				e.Msg, e.Field = "path: "+strings.TrimPrefix(e.Msg, "inputs.path.path: "), "path"
			}
			return err
		}
		a.Path = probe.Inputs["path"].Path
		a.Workspace, a.Etag, a.Archived, a.CreatedOn = ws, "", false, s.now()
		return tx.PutDataAsset(ctx, a, "")
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "data asset", a.Name)
	}
	return a, nil
}

// dataAsset returns one version; latest (or empty) is the newest that is
// not archived. A missing version's error lists the versions there are.
func (s *Service) dataAsset(ctx context.Context, tx store.Tx, ws, name, version string) (*api.DataAsset, error) {
	versions, err := tx.ListDataAssets(ctx, ws, name)
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, notFound("data asset", name, "run 'tide data list' to see the data assets of workspace "+ws+", or create it with 'tide data create -f data.yml'")
	}
	var have []string
	for i := len(versions) - 1; i >= 0; i-- {
		v := &versions[i]
		if (version == "" || version == spec.LatestVersion) && !v.Archived {
			return v, nil
		}
		if v.Version == version {
			return v, nil
		}
		label := v.Version
		if v.Archived {
			label += " (archived)"
		}
		have = append(have, label)
	}
	if version == "" || version == spec.LatestVersion {
		return nil, notFound("data asset", name+"@latest", "every version is archived ("+strings.Join(have, ", ")+"); name one as azureml:"+name+":VERSION or restore one with 'tide data restore'")
	}
	return nil, notFound("data asset", name+":"+version, "versions of "+name+": "+strings.Join(have, ", "))
}

// DataAsset returns one version of a data asset.
func (s *Service) DataAsset(ctx context.Context, ws, name, version string) (*api.DataAsset, error) {
	return inWorkspace(ctx, s, ws, func(tx store.Tx) (*api.DataAsset, error) { return s.dataAsset(ctx, tx, ws, name, version) })
}

// DataAssets lists data assets (every version; of one name when name is
// set), leaving archived versions out unless archived is set.
func (s *Service) DataAssets(ctx context.Context, ws, name string, archived bool) ([]api.DataAsset, error) {
	out := []api.DataAsset{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		all, err := tx.ListDataAssets(ctx, ws, name)
		for _, a := range all {
			if archived || !a.Archived {
				out = append(out, a)
			}
		}
		return err
	})
	return out, err
}

// ArchiveDataAsset archives or restores one version. Archiving changes
// only whether @latest and lists see it; its data and path stay.
func (s *Service) ArchiveDataAsset(ctx context.Context, ws, name, version string, archived bool) (*api.DataAsset, error) {
	var out *api.DataAsset
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		a, err := tx.GetDataAsset(ctx, ws, name, version)
		if store.IsNotFound(err) {
			_, err = s.dataAsset(ctx, tx, ws, name, version)
		}
		if err != nil {
			return err
		}
		a.Archived = archived
		out = a
		return tx.PutDataAsset(ctx, a, a.Etag)
	})
	return out, err
}

// resolveDataAsset replaces an input's azureml:NAME:VERSION or @latest
// with the asset's path, checking that the types agree.
func (s *Service) resolveDataAsset(ctx context.Context, tx store.Tx, ws string, in api.JobInput, field string, bad func(field, format string, args ...any) error) (api.JobInput, error) {
	ref, problem := spec.ParseDataAssetRef(in.Path)
	if problem != "" {
		return in, bad(field, "%s", problem)
	}
	a, err := s.dataAsset(ctx, tx, ws, ref.Name, ref.Version)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return in, bad(field, "%s", e.Msg)
		}
		return in, err
	}
	// An mltable asset is a folder (with its MLTable file): an mltable or
	// a uri_folder input reads it.
	if in.Type != a.Type && (a.Type != api.DataMLTable || in.Type != api.InputURIFolder) {
		return in, bad(strings.TrimSuffix(field, ".path")+".type", "data asset %s:%s is %s; use type: %s", a.Name, a.Version, a.Type, a.Type)
	}
	in.Path = a.Path
	return in, nil
}
