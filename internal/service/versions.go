package service

import (
	"context"
	"strconv"

	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// Environments, components and data assets are versioned: each version is
// immutable once stored, a new one without a version gets the next
// number, and "latest" (or no version) names the newest.

// nextVersion is one more than the highest numeric version, or "1".
func nextVersion[T any](versions []T, version func(*T) string) string {
	top := 0
	for i := range versions {
		if n, err := strconv.Atoi(version(&versions[i])); err == nil && n > top {
			top = n
		}
	}
	return strconv.Itoa(top + 1)
}

// findVersion returns one version of a name, or its newest when version is
// empty or "latest"; not found names kind and says what to do (hint).
func findVersion[T any](ctx context.Context, ws, name, version, kind, hint string,
	list func(ctx context.Context, ws, name string) ([]T, error),
	get func(ctx context.Context, ws, name, version string) (*T, error)) (*T, error) {
	if version == "" || version == spec.LatestVersion {
		versions, err := list(ctx, ws, name)
		if err != nil {
			return nil, err
		}
		if len(versions) == 0 {
			return nil, notFound(kind, name, hint)
		}
		return &versions[len(versions)-1], nil
	}
	v, err := get(ctx, ws, name, version)
	if store.IsNotFound(err) {
		return nil, notFound(kind, name+":"+version, hint)
	}
	return v, err
}

// inWorkspace runs read in a read transaction once the workspace is known
// to exist.
func inWorkspace[T any](ctx context.Context, s *Service, ws string, read func(tx store.Tx) (T, error)) (T, error) {
	var out T
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		out, err = read(tx)
		return err
	})
	return out, err
}
